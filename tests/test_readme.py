"""The README must not drift from results/: its table is the one extrapolation_test.py wrote,
and the ratios it quotes are the ones benchmark.py measured."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


import pytest


@pytest.mark.parametrize("name,script", [("extrapolation", "extrapolation_test.py"),
                                         ("context_use", "long_context_test.py"),
                                         ("retrieval", "long_context_test.py"),
                                         ("copy_calibration", "copy_calibration.py")])
def test_readme_tables_are_the_results_tables(name, script):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"
    assert start in readme and end in readme, f"README lost its {name} table markers"
    block = readme.split(start, 1)[1].split(end, 1)[0].strip()
    results = (ROOT / "results" / f"{name}.md").read_text(encoding="utf-8").strip()
    assert block == results, f"README's table differs from results/{name}.md: rerun {script}"


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


def test_readme_quotes_final_validation_losses():
    """The findings quote each scheme's last validation loss; they must be train_log.csv's."""
    import csv
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Validation loss at 256 after training\s+\(`results/train_log.csv`[^)]*\):(.*?)nats/char", readme, re.S)
    assert m, "README lost the sentence quoting the final validation losses"
    quoted = dict(re.findall(r"(none|learned|sin|rope|alibi) (\d\.\d{3})", m.group(1)))
    assert len(quoted) == 5, f"expected five quoted losses, got {quoted}"
    last = {}
    with open(ROOT / "results" / "train_log.csv", newline="") as f:
        for row in csv.DictReader(f):
            last[row["variant"]] = float(row["val_loss"])  # rows are in step order: the last one wins
    for scheme, value in quoted.items():
        diff = abs(float(value) - last[scheme])
        assert diff < 5e-4, f"README quotes {scheme} {value}, train_log.csv ends at {last[scheme]:.4f} (diff {diff:.1e})"
