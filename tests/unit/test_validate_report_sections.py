"""validate/report.py's report.md sections, each a step of render_markdown tested alone."""

from __future__ import annotations

from imagesmith.validate.report import CheckOutcome, _checks_section, _failures_section, _perf_rows


def test_perf_rows_are_the_perf_checks_then_nccl_scaling_and_the_soak() -> None:
    checks = [
        CheckOutcome("test_soak", "m", figures={"judgements": [{"where": "soak"}, "not a row"]}),
        CheckOutcome("test_scaling_efficiency", "m", figures={"judgement": {"where": "scaling"}}),
        CheckOutcome("test_nccl_allreduce", "m", figures={"judgement": "no judgement"}),
        CheckOutcome("test_matmul_throughput", "m", figures={"judgements": [{"where": "matmul"}]}),
        CheckOutcome("test_gpu_memory_bandwidth", "m", figures={"judgements": [{"where": "hbm"}]}),
    ]
    assert [r["where"] for r in _perf_rows(checks)] == ["hbm", "matmul", "scaling", "soak"]


def test_failures_list_only_what_neither_passed_nor_skipped() -> None:
    checks = [
        CheckOutcome("test_a", "m", status="passed"),
        CheckOutcome("test_b", "m", status="skipped"),
        CheckOutcome("test_c", "m", status="failed", message="boom", fix="do x"),
    ]
    text = "\n".join(_failures_section(checks))
    assert "### test_c" in text
    assert "**Fix:** do x" in text
    assert "test_a" not in text
    assert "test_b" not in text
    assert _failures_section(checks[:2]) == []


def test_the_checks_table_keeps_a_pipe_in_a_note_out_of_the_columns() -> None:
    row = _checks_section([CheckOutcome("test_a", "m", status="failed", message="a|b\nmore")])[-2]
    assert row.endswith("| a/b |")
    assert row.count("|") == 5
