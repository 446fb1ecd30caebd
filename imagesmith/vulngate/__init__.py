"""The vulnerability gate of ``imagesmith release`` (issue 26).

A candidate digest is released only when a scan of *that digest* shows no advisory at or above the project's
``fail_on`` severity, except those on the allowlist (each entry with a reason and an expiry date; an expired
entry counts as none). The scan is read, never run: the nightly runs the scanner where its database is
reachable and leaves its report beside the validation reports.

What is read for a digest ``sha256:<hex>`` (``release --scan-reports DIR``; files named by the digest):

- ``DIR/sha256-<hex>.grype.json`` — grype's JSON output (``grype -o json registry:IMAGE@DIGEST``);
  ``source.target.manifestDigest`` or one of ``source.target.repoDigests`` must be the digest.
- ``DIR/sha256-<hex>.trivy.json`` — trivy's JSON output (``trivy image -f json IMAGE@DIGEST``);
  one of ``Metadata.RepoDigests`` must name the digest.
- ``DIR/sha256-<hex>.cdx.json`` / ``.spdx.json`` — an SBOM of the digest (CycloneDX or SPDX JSON, e.g. the one
  ``imagesmith`` attaches), whose packages are matched against the OSV data file ``[release.vulnerabilities]
  osv`` (OSV JSON: one record, a list of records, or ``{"vulns": [...]}``). Debian versions are compared with
  dpkg's ordering (:func:`dpkg_compare`), PyPI versions with PEP 440 (``packaging``).

A report is untrusted input: a file larger than :data:`MAX_REPORT_BYTES`, not JSON, of the wrong shape or
about another digest is one :class:`~imagesmith.errors.ConfigError` naming the file and the fix.

The package: :mod:`~imagesmith.vulngate.records` (severities, findings, the policy, a scan, a verdict),
:mod:`~imagesmith.vulngate.policy` (``[release.vulnerabilities]``), :mod:`~imagesmith.vulngate.reading`
(untrusted JSON), :mod:`~imagesmith.vulngate.rating` (severities, CVSS), :mod:`~imagesmith.vulngate.scanners`
(grype's and trivy's reports), :mod:`~imagesmith.vulngate.osv` (SBOM packages × OSV records),
:mod:`~imagesmith.vulngate.dpkg` (Debian version ordering) and :mod:`~imagesmith.vulngate.gating` (finding a
scan, judging it: :func:`gate`). Every public name is importable from ``imagesmith.vulngate``.
"""

from __future__ import annotations

from imagesmith.vulngate.dpkg import dpkg_compare as dpkg_compare
from imagesmith.vulngate.gating import digest_stem as digest_stem
from imagesmith.vulngate.gating import find_scan as find_scan
from imagesmith.vulngate.gating import gate as gate
from imagesmith.vulngate.gating import judge as judge
from imagesmith.vulngate.gating import read_scan as read_scan
from imagesmith.vulngate.osv import DEB_ECOSYSTEMS as DEB_ECOSYSTEMS
from imagesmith.vulngate.osv import MAX_OSV_BYTES as MAX_OSV_BYTES
from imagesmith.vulngate.osv import Package as Package
from imagesmith.vulngate.osv import compare as compare
from imagesmith.vulngate.osv import load_osv as load_osv
from imagesmith.vulngate.osv import match_osv as match_osv
from imagesmith.vulngate.osv import sbom_packages as sbom_packages
from imagesmith.vulngate.policy import load_policy as load_policy
from imagesmith.vulngate.policy import parse_policy as parse_policy
from imagesmith.vulngate.rating import cvss3_base_score as cvss3_base_score
from imagesmith.vulngate.rating import cvss_rating as cvss_rating
from imagesmith.vulngate.reading import MAX_REPORT_BYTES as MAX_REPORT_BYTES
from imagesmith.vulngate.records import DEFAULT_ALLOWLIST_MAX_DAYS as DEFAULT_ALLOWLIST_MAX_DAYS
from imagesmith.vulngate.records import FAIL_ON as FAIL_ON
from imagesmith.vulngate.records import MAX_ALLOWLIST_MAX_DAYS as MAX_ALLOWLIST_MAX_DAYS
from imagesmith.vulngate.records import SEVERITIES as SEVERITIES
from imagesmith.vulngate.records import AllowEntry as AllowEntry
from imagesmith.vulngate.records import Finding as Finding
from imagesmith.vulngate.records import Policy as Policy
from imagesmith.vulngate.records import Scan as Scan
from imagesmith.vulngate.records import Verdict as Verdict
from imagesmith.vulngate.records import normalize_severity as normalize_severity
from imagesmith.vulngate.scanners import GRYPE_DEFAULT_IGNORE_RULES as GRYPE_DEFAULT_IGNORE_RULES
from imagesmith.vulngate.scanners import parse_grype as parse_grype
from imagesmith.vulngate.scanners import parse_trivy as parse_trivy
