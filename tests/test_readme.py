"""The README must not drift from results/: its table is the one extrapolation_test.py wrote,
and the ratios it quotes are the ones benchmark.py measured."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_table_is_the_results_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- extrapolation-table:start -->", "<!-- extrapolation-table:end -->"
    assert start in readme and end in readme, "README lost its table markers"
    block = readme.split(start, 1)[1].split(end, 1)[0].strip()
    results = (ROOT / "results" / "extrapolation.md").read_text(encoding="utf-8").strip()
    assert block == results, "README's table differs from results/extrapolation.md: rerun extrapolation_test.py"


def test_readme_quotes_measured_ratios():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bench = (ROOT / "results" / "benchmark.md").read_text(encoding="utf-8")
    ratios = bench.split("## Ratios", 1)[1]
    train = dict(re.findall(r"(none|learned|sin|rope|alibi) (\d\.\d{3})", ratios.split("Reference:")[0]))
    assert len(train) == 5, ratios
    for scheme, value in train.items():
        assert f"{scheme} {value}" in readme or f"{scheme} {value}**" in readme or f"**{scheme} {value}" in readme, \
            f"README does not quote the measured {scheme} throughput ratio {value}"
    evalratio = re.search(r"evaluation time ratio at T=\d+ .*?: (\d\.\d{3})", ratios).group(1)
    assert evalratio in readme, f"README does not quote the measured ALiBi/RoPE ratio {evalratio}"
