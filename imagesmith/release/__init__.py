"""``imagesmith release``: promote only validated digests through the registry HTTP API; publish the index.

For every cell of a matrix (``--only`` globs narrow it):

1. **Candidate.** ``imagesmith build --push`` left ``<cell id>-candidate`` in the cell's registries. Every
   registry that holds it must hold the *same* digest D (else: refused).
2. **Evidence.** A signed validation attestation (imagesmith/attestation.py: ``attestation.dsse.json`` beside
   the ``report.json`` of ``imagesmith validate IMAGE@D --sign-key KEY``, searched under ``--reports``) that
   verifies with a trusted key (``[release] trusted_keys``, ``--trusted-key``), whose statement's subject is
   exactly D and whose predicate (the report) passed; and no signed attestation of D that failed (one per GPU
   family in the nightly: any failure holds the digest back). A report file alone is never enough: unsigned,
   altered, unknown-key and other-digest evidence is named in the refusal with its reason. Without local
   evidence, the attestations an earlier run stored beside D (``sha256-<hex>.att``) are verified again. A
   signed pass must prove something: its verdict is recomputed from its checks and it must record the GPU
   host (:meth:`Report.unusable_pass`), else refused naming it (stored ones like that are never counted).
   **Content.** The entry's fields come from D's image config (:func:`image_facts`: labels of the config the
   manifest names, hash-checked) and the verified attestations; the entry must pass the index's own parser
   (:func:`index_problem`) before anything moves.
3. **Promotion**, each step checked before it is done, so an interrupted run converges when rerun and a
   finished one is a no-op; a and b in every registry first, c only once a and b succeeded everywhere (a
   registry that fails leaves no release tag anywhere; a tag that fails is rolled back elsewhere):
   a. the manifest D (and its blobs: cross-repository mount on one registry, streamed copy between
      registries; never a rebuild, never a second push from the engine) is copied from a registry holding the
      candidate, put by digest (tags nothing);
   b. the signed attestations are stored in cosign's layout (``sha256-<hex of D>.att``: DSSE layers, see
      imagesmith/attestation.py), and a readable copy of the report as an OCI artifact tagged
      ``sha256-<hex of D>.validation`` (``subject`` = D: registries with the referrers API list it);
   c. only then the release tag ``<cell id>`` is put, and read back: it must resolve to D.
   Every blob of D is read back and hashed in every registry once (:class:`VerifiedBlobs` remembers it by
   registry host and digest), before c: a damaged copy is repaired or named, and no tag moves.
4. **Index.** Released cells become entries of the release index (imagesmith/index.py, docs/release.md): the
   project's index file (``[paths].release_index`` / ``--index-file``, or the index of ``--extend-from
   REGISTRY``) is extended, every entry it carries over re-verified (:func:`verify_carried`: its tag and its
   signed attestations, in each registry) and rebuilt from its content (:func:`rebind_carried`: every
   correction is named in the summary), the file is updated and the same JSON is pushed as the artifact
   tag ``release-index`` to every registry repository of the matrix (what ``imagesmith pick --index
   oci://…`` reads); with a signing key, its DSSE envelope is written beside the file (``index.json.sig``)
   and added to the artifact.

One module per part (``release-layers`` in pyproject.toml keeps them one way; callers import from
``imagesmith.release``):

- :mod:`.base` — the cell released (:class:`ReleaseCell`), media types, the clock;
- :mod:`.facts` — what the image config of a digest says (:func:`image_facts`) and the entry bound to it;
- :mod:`.evidence` — validation reports and signed attestations, read and verified (:func:`collect_reports`);
- :mod:`.outcome` — :class:`CellResult`, :class:`Outcome`, a released cell's index entry, the gates' shapes;
- :mod:`.blobs` — :class:`VerifiedBlobs`, blobs read back by content once per registry;
- :mod:`.artifacts` — the report artifact and the index artifact in a registry (:func:`publish_index`);
- :mod:`.gates` — the vulnerability gate and the signed SBOMs a run is given;
- :mod:`.state` — :class:`CellRun`, the one state the steps of a cell's release read and fill in;
- :mod:`.checks`, :mod:`.promotion` — those steps (before anything moves; the copy and the tag);
- :mod:`.steps` — :data:`STEPS`, the release of one cell as a list of named steps, and :func:`release_cell`;
- :mod:`.carried` — carried-entry re-verification (:func:`verify_carried`, :func:`rebind_carried`);
- :mod:`.publish` — the index extended, written, signed and published;
- :mod:`.run` — :func:`release_cells`, :func:`release_matrix`, :func:`candidates`;
- :mod:`.request` — the command's layer: :class:`ReleaseRequest`, its flag rules (:func:`prepare_release`) and
  :func:`release_for`; ``candidates``' too (:class:`CandidatesRequest`, :func:`prepare_candidates`,
  :func:`candidates_for`, :class:`CandidatesResult`).
"""

from __future__ import annotations

from imagesmith.release.artifacts import (
    IndexPublicationError,
    artifact_manifest,
    attach_report,
    attached_report_ok,
    index_manifest,
    index_signature_path,
    publish_index,
    publish_index_everywhere,
    stage_index,
)
from imagesmith.release.base import (
    EMPTY_BLOB,
    EMPTY_DIGEST,
    EMPTY_MEDIA_TYPE,
    INDEX_ARTIFACT_TYPE,
    REPORT_ARTIFACT_TYPE,
    REPORT_MEDIA_TYPE,
    ReleaseCell,
    _with_fix,
)
from imagesmith.release.blobs import (
    VerifiedBlobs,
)
from imagesmith.release.carried import (
    Carried,
    Rebound,
    carry_over,
    rebind_carried,
    verify_carried,
)
from imagesmith.release.checks import (
    _candidate_digests,
)
from imagesmith.release.evidence import (
    Report,
    attested_report,
    collect_reports,
    parse_report,
    read_evidence,
    read_report,
    usable_evidence,
)
from imagesmith.release.facts import (
    LABEL_CUDA,
    LABEL_MIN_FULL,
    LABEL_MIN_MINOR,
    LABEL_PYTHON,
    LABEL_SHM,
    LABEL_TORCH,
    LABEL_TORCH_ARCH,
    LABEL_TORCHVISION,
    LABEL_VARIANT,
    MAX_CONFIG_BYTES,
    ImageFacts,
    bound_entry,
    entry_changes,
    image_facts,
    index_problem,
)
from imagesmith.release.gates import (
    sbom_finder,
    vulnerability_gate,
)
from imagesmith.release.outcome import (
    CellResult,
    Gate,
    Outcome,
    ReleaseStatus,
    SbomFinder,
    index_entry,
)
from imagesmith.release.promotion import (
    TagPromotionError,
)
from imagesmith.release.request import (
    CandidatesRequest,
    CandidatesResult,
    PreparedRelease,
    ReleaseRequest,
    candidates_for,
    prepare_candidates,
    prepare_release,
    release_for,
)
from imagesmith.release.run import (
    candidate_state,
    candidates,
    default_client,
    release_cells,
    release_matrix,
)
from imagesmith.release.state import (
    CellOptions,
    CellRun,
)
from imagesmith.release.steps import (
    STEPS,
    Step,
    release_cell,
    run_steps,
)

__all__ = [
    "EMPTY_BLOB",
    "EMPTY_DIGEST",
    "EMPTY_MEDIA_TYPE",
    "INDEX_ARTIFACT_TYPE",
    "LABEL_CUDA",
    "LABEL_MIN_FULL",
    "LABEL_MIN_MINOR",
    "LABEL_PYTHON",
    "LABEL_SHM",
    "LABEL_TORCH",
    "LABEL_TORCHVISION",
    "LABEL_TORCH_ARCH",
    "LABEL_VARIANT",
    "MAX_CONFIG_BYTES",
    "REPORT_ARTIFACT_TYPE",
    "REPORT_MEDIA_TYPE",
    "STEPS",
    "CandidatesRequest",
    "CandidatesResult",
    "Carried",
    "CellOptions",
    "CellResult",
    "CellRun",
    "Gate",
    "ImageFacts",
    "IndexPublicationError",
    "Outcome",
    "PreparedRelease",
    "Rebound",
    "ReleaseCell",
    "ReleaseRequest",
    "ReleaseStatus",
    "Report",
    "SbomFinder",
    "Step",
    "TagPromotionError",
    "VerifiedBlobs",
    "_candidate_digests",
    "_with_fix",
    "artifact_manifest",
    "attach_report",
    "attached_report_ok",
    "attested_report",
    "bound_entry",
    "candidate_state",
    "candidates",
    "candidates_for",
    "carry_over",
    "collect_reports",
    "default_client",
    "entry_changes",
    "image_facts",
    "index_entry",
    "index_manifest",
    "index_problem",
    "index_signature_path",
    "parse_report",
    "prepare_candidates",
    "prepare_release",
    "publish_index",
    "publish_index_everywhere",
    "read_evidence",
    "read_report",
    "rebind_carried",
    "release_cell",
    "release_cells",
    "release_for",
    "release_matrix",
    "run_steps",
    "sbom_finder",
    "stage_index",
    "usable_evidence",
    "verify_carried",
    "vulnerability_gate",
]
