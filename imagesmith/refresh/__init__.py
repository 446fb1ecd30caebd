"""Draft torch / torchvision / torchaudio rows from PyPI and diff them against ``data/torch.toml``.

Primary sources only, read through the package index's JSON Simple API (PEP 691):

- the file list of a project: wheel file names (cp tags → the Python range), sizes, upload times;
- each wheel's ``METADATA`` (Requires-Dist: the NCCL, cuDNN and CUDA runtime pins of PyPI's default CUDA
  build; torchvision's and torchaudio's ``torch`` pin), from the PEP 658 ``.metadata`` file when the index
  has one, else from the wheel itself with HTTP range requests (its zip central directory, then that one
  member);
- the CUDA architectures of PyPI's default build, from the fatbin headers in ``torch/lib/libtorch_cuda.so``:
  the member is streamed from its local header and inflated on the fly until its ``.nv_fatbin`` run ends
  (:mod:`imagesmith.fatbin`); the rest of the member and of the wheel is never fetched.

Only PyPI's default variant of a release can be read here; the other variants (PyTorch's own wheel index) are
reported as not checked. :class:`LiveSource` reads the index; ``record`` keeps what it read (trimmed) in a
folder that :class:`RecordedSource` replays (``--offline DIR``; the unit tests' data).

The package: :mod:`~imagesmith.refresh.transfer` (HTTP with byte accounting, a wheel read by ranges),
:mod:`~imagesmith.refresh.pypi` (which index and CA; the index's files, live or recorded),
:mod:`~imagesmith.refresh.drafts` (a release's draft row), :mod:`~imagesmith.refresh.diff` (drafts against
``data/torch.toml``, :func:`run`) and :mod:`~imagesmith.refresh.torchtoml` (:func:`write`). Every public name
is importable from ``imagesmith.refresh``, the path the command, ``lock --sizes`` and the tests use.
"""

from __future__ import annotations

from imagesmith.refresh.diff import EXIT_DIFFERENCES as EXIT_DIFFERENCES
from imagesmith.refresh.diff import Result as Result
from imagesmith.refresh.diff import Row as Row
from imagesmith.refresh.diff import compare as compare
from imagesmith.refresh.diff import parse_releases as parse_releases
from imagesmith.refresh.diff import run as run
from imagesmith.refresh.drafts import Draft as Draft
from imagesmith.refresh.drafts import Pins as Pins
from imagesmith.refresh.drafts import draft as draft
from imagesmith.refresh.drafts import parse_metadata as parse_metadata
from imagesmith.refresh.drafts import python_range as python_range
from imagesmith.refresh.pypi import CUDA_LIBRARY as CUDA_LIBRARY
from imagesmith.refresh.pypi import LINUX_X86 as LINUX_X86
from imagesmith.refresh.pypi import SIMPLE_JSON as SIMPLE_JSON
from imagesmith.refresh.pypi import DistFile as DistFile
from imagesmith.refresh.pypi import LiveSource as LiveSource
from imagesmith.refresh.pypi import RecordedSource as RecordedSource
from imagesmith.refresh.pypi import Source as Source
from imagesmith.refresh.pypi import ca_bundle as ca_bundle
from imagesmith.refresh.pypi import check_index_url as check_index_url
from imagesmith.refresh.pypi import default_index_url as default_index_url
from imagesmith.refresh.torchtoml import edit_field as edit_field
from imagesmith.refresh.torchtoml import release_toml as release_toml
from imagesmith.refresh.torchtoml import write as write
from imagesmith.refresh.transfer import Http as Http
from imagesmith.refresh.transfer import Member as Member
from imagesmith.refresh.transfer import RemoteWheel as RemoteWheel
from imagesmith.refresh.transfer import parse_central_directory as parse_central_directory
from imagesmith.refresh.transfer import read_fatbins as read_fatbins
