"""One schema layer for imagesmith's files: a declarative description that both checks a parsed file (one
error naming the file, the dotted key, the problem, the nearest valid value and the fix) and writes the JSON
Schema editors and other tools use (``imagesmith schema``, committed under ``docs/schemas/``).

Shape checks live here — unknown keys, types, required keys, enums, patterns, empty or repeated lists; what
needs the project or the data tables (a path inside the project, a GPU or torch release imagesmith knows,
one field against another) stays with the reader, after this pass. :class:`Schema` describes
``imagesmith.toml`` (:mod:`imagesmith.project`), the user config (:mod:`imagesmith.config`),
``registries.toml`` and the matrix files (:mod:`imagesmith.matrix`), the release index
(:mod:`imagesmith.index`), the validation report (:mod:`imagesmith.validate.record`) and the cluster report
(:mod:`imagesmith.validate.clusterrecord`). Each reader words its
problems through a :class:`Checker`; the index and the report keep their own wording by subclassing it.

The package: :mod:`~imagesmith.schema.core` (the layer: :class:`Field`, :class:`Schema`, :class:`Checker`,
the JSON Schema writer) and one module a family of files — :mod:`~imagesmith.schema.project`
(``imagesmith.toml``, the user config), :mod:`~imagesmith.schema.registries`, :mod:`~imagesmith.schema.matrix`
(with the strict shapes of values that reach a Dockerfile), :mod:`~imagesmith.schema.index` (the release
index), :mod:`~imagesmith.schema.report` (the validation report, a listing, the cluster report). Every public
name is importable from ``imagesmith.schema``, the path readers, tests and docs use.
"""

from __future__ import annotations

from imagesmith.schema.core import PERF_FIGURES as PERF_FIGURES
from imagesmith.schema.core import TYPE_NAMES as TYPE_NAMES
from imagesmith.schema.core import Checker as Checker
from imagesmith.schema.core import Field as Field
from imagesmith.schema.core import Kind as Kind
from imagesmith.schema.core import Problem as Problem
from imagesmith.schema.core import Schema as Schema
from imagesmith.schema.core import check_toml_text as check_toml_text
from imagesmith.schema.core import shown as shown
from imagesmith.schema.index import CLUSTER_FABRICS as CLUSTER_FABRICS
from imagesmith.schema.index import RELEASE_INDEX as RELEASE_INDEX
from imagesmith.schema.index import RELEASE_INDEX_SCHEMA as RELEASE_INDEX_SCHEMA
from imagesmith.schema.index import RELEASE_INDEX_SCHEMAS as RELEASE_INDEX_SCHEMAS
from imagesmith.schema.index import RELEASE_INDEX_V1 as RELEASE_INDEX_V1
from imagesmith.schema.matrix import ABS_PATH as ABS_PATH
from imagesmith.schema.matrix import BIDI_CONTROLS as BIDI_CONTROLS
from imagesmith.schema.matrix import FLAVORS as FLAVORS
from imagesmith.schema.matrix import IMAGE_REF as IMAGE_REF
from imagesmith.schema.matrix import MATRIX as MATRIX
from imagesmith.schema.matrix import MIRROR_PROFILE_NAMES as MIRROR_PROFILE_NAMES
from imagesmith.schema.matrix import NCCL_TOOLKITS as NCCL_TOOLKITS
from imagesmith.schema.matrix import TORCH_SOURCES as TORCH_SOURCES
from imagesmith.schema.matrix import URL as URL
from imagesmith.schema.matrix import VERSION as VERSION
from imagesmith.schema.project import CONFIG as CONFIG
from imagesmith.schema.project import MATRIX_NAME as MATRIX_NAME
from imagesmith.schema.project import PROJECT as PROJECT
from imagesmith.schema.registries import HOST_PORT as HOST_PORT
from imagesmith.schema.registries import PORT as PORT
from imagesmith.schema.registries import REGISTRIES as REGISTRIES
from imagesmith.schema.registries import REGISTRY_KINDS as REGISTRY_KINDS
from imagesmith.schema.registries import REPO_PATH as REPO_PATH
from imagesmith.schema.report import CLUSTER_REPORT as CLUSTER_REPORT
from imagesmith.schema.report import CLUSTER_REPORT_KIND as CLUSTER_REPORT_KIND
from imagesmith.schema.report import CLUSTER_REPORT_SCHEMA as CLUSTER_REPORT_SCHEMA
from imagesmith.schema.report import CLUSTER_REPORT_SCHEMAS as CLUSTER_REPORT_SCHEMAS
from imagesmith.schema.report import LISTING as LISTING
from imagesmith.schema.report import REPORT_GPU as REPORT_GPU
from imagesmith.schema.report import REPORT_SCHEMA as REPORT_SCHEMA
from imagesmith.schema.report import REPORT_SCHEMAS as REPORT_SCHEMAS
from imagesmith.schema.report import VALIDATION_REPORT as VALIDATION_REPORT
from imagesmith.schema.report import VERDICTS as VERDICTS

#: every file the schema layer describes, in the order `imagesmith schema` writes them
SCHEMAS: tuple[Schema, ...] = (
    PROJECT,
    CONFIG,
    REGISTRIES,
    MATRIX,
    RELEASE_INDEX,
    VALIDATION_REPORT,
    LISTING,
    CLUSTER_REPORT,
)
