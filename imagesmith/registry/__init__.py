"""Registry HTTP API v2 client (requests + tenacity), one module per layer:

- :mod:`.faults` — the retry policy and what a registry's error body means;
- :mod:`.api` — the seam (:class:`RegistryApi`) and its values;
- :mod:`.transport` — credentials, auth challenges, redirects, TLS, the answer checked;
- :mod:`.upload` — chunked, resumable blob uploads;
- :mod:`.client` — :class:`RegistryClient`, the HTTP implementation of the seam;
- :mod:`.copy` — verified copies between registries;
- :mod:`.promote` — tags moved across registries, read back, rolled back on failure.

Everything a caller imports comes from here (``from imagesmith.registry import …``).

What build, verify and release need from a registry (:class:`RegistryApi`, the seam they are typed with;
:class:`RegistryClient` speaks HTTP, tests pass fakes): manifests (HEAD/GET/PUT/DELETE), tags, blobs (HEAD,
cross-repository mount, streamed copy between registries), with

- Basic and Bearer-token auth: the ``WWW-Authenticate`` challenge is followed as Docker Hub, GHCR and ACR
  expect (token from the realm with ``service`` + ``scope``, Basic credentials sent to the realm when we
  have them);
- credentials from the registry's chain (:mod:`imagesmith.credentials`, chosen by its ``kind``): environment,
  docker config, then ECR/ACR token commands; resolved when the registry first asks for them, refreshed when
  they expire, and on an ``unauthorized`` answer refreshed once (a short-lived token or credential helper)
  and the request retried — never in a loop; never argv, never printed (``Credentials`` hides its repr);
- TLS with the registry's own CA: ``/etc/docker/certs.d/<host>/ca.crt`` (dockerd's convention) or an explicit
  file; never ``verify=False``; ``insecure`` registries are spoken to in plain HTTP;
- retries (:class:`RetryPolicy`) per request, with exponential backoff and jitter, a per-request timeout and a
  per-operation deadline, on transient faults (5xx, 429, timeouts, connection resets), never on
  ``UNAUTHORIZED``, ``DENIED``, ``MANIFEST_UNKNOWN`` or what a registry says will not change by itself
  (storage full, quota, invalid name or manifest: :func:`registry_fault` turns those bodies into a fix line);
- blob uploads in chunks (``PATCH`` with ``Content-Range``): a dropped chunk is resumed at the offset the
  registry reports, else the blob restarts from its first byte; an upload given up is cancelled (``DELETE`` of
  the upload session) so it does not stay on the registry's disk;
- copies that never trust a blob by its name alone (:func:`copy_blob`, :data:`VERIFY_LEVELS`): a blob the
  destination already holds is checked (HEAD digest and size, or a full re-read), a mismatch is repaired or
  reported as :class:`~imagesmith.errors.CorruptBlobError`; errors say which side failed (source/destination).
"""

from __future__ import annotations

from typing import Protocol

from imagesmith.credentials import Credentials as Credentials  # re-exported: callers may import it from here
from imagesmith.credentials import credential_chain
from imagesmith.credentials import lookup_credentials as lookup_credentials
from imagesmith.registry.api import (
    ACCEPT_MANIFESTS,
    INDEX_TYPES,
    MANIFEST_LIST_V2,
    MANIFEST_V2,
    OCI_INDEX,
    OCI_MANIFEST,
    UPLOAD_CHUNK,
    BlobStat,
    BlobStream,
    ManifestData,
    RegistryApi,
)
from imagesmith.registry.client import RegistryClient
from imagesmith.registry.copy import (
    VERIFY_ENV,
    VERIFY_LEVELS,
    Verify,
    blob_digest,
    copy_blob,
    copy_manifest,
    ensure_blob,
    read_blob,
    read_small_blob,
    verify_blobs,
    verify_level,
)
from imagesmith.registry.faults import RegistryFault, RetryPolicy, registry_fault, retry_after_seconds
from imagesmith.registry.promote import Promotion, PromotionError, promote
from imagesmith.registry.promote import Target as PromotionTarget
from imagesmith.registry.transport import Transport, docker_ca_file, parse_challenge
from imagesmith.registry.upload import SizedChunks, Uploader

__all__ = [
    "ACCEPT_MANIFESTS",
    "INDEX_TYPES",
    "MANIFEST_LIST_V2",
    "MANIFEST_V2",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "UPLOAD_CHUNK",
    "VERIFY_ENV",
    "VERIFY_LEVELS",
    "BlobStat",
    "BlobStream",
    "Credentials",
    "Endpoint",
    "ManifestData",
    "Promotion",
    "PromotionError",
    "PromotionTarget",
    "RegistryApi",
    "RegistryClient",
    "RegistryFault",
    "RetryPolicy",
    "SizedChunks",
    "Transport",
    "Uploader",
    "Verify",
    "blob_digest",
    "client_for",
    "copy_blob",
    "copy_manifest",
    "docker_ca_file",
    "ensure_blob",
    "lookup_credentials",
    "parse_challenge",
    "promote",
    "read_blob",
    "read_small_blob",
    "registry_fault",
    "retry_after_seconds",
    "verify_blobs",
    "verify_level",
]


class Endpoint(Protocol):
    """What :func:`client_for` needs of a registry target (:class:`imagesmith.refs.Registry`)."""

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def insecure(self) -> bool: ...


def client_for(
    target: Endpoint,
    *,
    attempts: int | None = None,
    backoff: float | None = None,
    timeout: float | None = None,
) -> RegistryClient:
    """The one factory of registry clients for a cell's registries (build and release take it as a seam) and
    for pick's index artifact (which tries quickly: *attempts*, *backoff*, *timeout* override the retry
    policy, as :class:`RegistryClient` takes them).

    The target's ``kind`` chooses the credential chain (:func:`imagesmith.credentials.credential_chain`).
    """
    return RegistryClient(
        target.host,
        name=target.name,
        kind=target.kind,
        insecure=target.insecure,
        chain=credential_chain(target.host, target.kind, name=target.name),
        attempts=attempts,
        backoff=backoff,
        timeout=timeout,
    )
