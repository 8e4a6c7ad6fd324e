"""lab/docsync/tables.py, the computed tables of the README and docs/: the glance table applies its stated rules, the copy family's
table names each row's text twin, and tables are synced only into the repository's own pages.
(That the pages hold what these give: test_readme.py.)"""
import json

from lab import eval_common as EC
from lab.docsync import tables
from lab.docsync.tables import copy_family_table


def _write(tmp_path, ppl, effective, exact):
    """exact: {variant: (worst exact match at d <= 200, exact match at d = 512)}."""
    rows = [{"variant": n, "ppl_256": p[0], "ppl_4096": p[1]} for n, p in ppl.items()]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    (tmp_path / "context_use.json").write_text(json.dumps(
        {"meta": {}, "rows": [{"variant": n, "effective_context": c} for n, c in effective.items()]}))
    ret = [{"variant": n, "distance": d, "exact": e} for n, (near, far) in exact.items()
           for d, e in ((32, 1.0), (200, near), (512, far), (1024, 1.0))]
    (tmp_path / "retrieval.json").write_text(json.dumps({"meta": {}, "rows": ret}))


def test_glance_table_applies_the_stated_rules(tmp_path):
    _write(tmp_path, {"rope": (5.0, 6.0), "alibi": (5.0, 6.01), "rope+yarn": (5.0, 9.0), "rope_ft_yarn": (5.0, 5.0),
                      "t5": (5.0, 5.0)},  # a field scheme: its rows are docs/field.md's, not the glance table's
           {"rope": 448, "alibi": 192}, {"alibi_copy": (0.5, 0.5), "rope_copy": (0.49, 0.0),
                                          "rope_copy_ft_yarn": (0.9, 0.49), "rope": (0.0, 0.0)})
    lines = {l.split(" | ")[0][2:]: l for l in tables.glance_table(tmp_path).splitlines()[2:]}
    assert list(lines) == ["rope", "alibi", "rope+yarn", "rope_ft_yarn"], lines
    # breaks: ratio 6.0 / 5.0 = 1.2 is not > 1.2; 6.01 / 5.0 is. passkey: the worst d <= 200 (and d = 512), >= 50%;
    # the text model's own passkey and its copy-trained twin's each in their own columns, the twin named
    assert "| 6.00 | no | yes (448) | no (0%) | rope_copy | no / no (49% / 0%) |" in lines["rope"], lines["rope"]
    assert "| 6.01 | yes | no (192) | not measured | alibi_copy | yes / yes (50% / 50%) |" in lines["alibi"], \
        lines["alibi"]
    assert lines["rope+yarn"].endswith("| yes | not measured | not measured | - | not measured |"), lines["rope+yarn"]
    assert lines["rope_ft_yarn"].endswith("| rope_copy_ft_yarn | yes / no (90% / 49%) |"), lines["rope_ft_yarn"]


def test_sync_table_writes_only_for_the_repository_results(tmp_path):
    page = EC.HERE / "docs" / "results.md"  # the page that holds the glance table
    before = page.read_text(encoding="utf-8")
    tables.sync_table("glance", "| a changed table |", tmp_path)  # not the repository's results/: no write
    assert page.read_text(encoding="utf-8") == before


def test_copy_family_table_names_the_text_twin_of_the_new_rows(tmp_path):
    """copy_family_table reads irope_copy_notemp and its "(temp on)" row: the checkpoint's own ppl,
    and irope as the text-trained counterpart (there is no irope_notemp)."""
    ex = [{"variant": n, "train_len": 256, "ppl_256": p} for n, p in
          (("irope", 5.12), ("irope_copy", 5.55), ("irope_copy_notemp", 5.61))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex}))
    rows = [{"variant": v, "family": "copy", "distance": d, "exact": 0.5, "per_char": 0.9}
            for v in ("irope_copy", "irope_copy (no temp)", "irope_copy_notemp", "irope_copy_notemp (temp on)")
            for d in (32, 512)]
    (tmp_path / "retrieval.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    lines = {ln.split(" | ")[0][2:]: ln for ln in copy_family_table(tmp_path).splitlines()[2:] if ln.startswith("| ")}
    assert lines["irope_copy_notemp"].startswith("| irope_copy_notemp | 5.61 | irope 5.12 |"), lines
    assert lines["irope_copy_notemp (temp on)"].startswith("| irope_copy_notemp (temp on) | 5.61 | irope 5.12 |")
    assert lines["irope_copy (no temp)"].startswith("| irope_copy (no temp) | 5.55 | irope 5.12 |"), lines


def test_current_models_table_puts_seeds_in_order_and_reads_the_stated_contexts(tmp_path):
    """Seed 0's row first, then [seed1], [seed2]; ppl@4096 of seed 0 only; losses at 0, 192 and the
    longest context measured; a row without context use gets '-'; a table without any current row is ""."""
    ex = [{"variant": n, "train_len": 256, "ppl_256": p, "ppl_4096": 10 * p} for n, p in
          (("rope [seed2]", 4.83), ("rope", 4.89), ("rope [seed1]", 4.79), ("irope", 5.12), ("irope [seed1]", 5.06))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {"lengths": [256, 4096]}, "rows": ex}))
    ctx = [{"variant": "rope", "c0": 1.5, "c64": 9.0, "c192": 1.9, "c3840": 3.7},
           {"variant": "irope (no temp)", "c0": 1.6, "c64": 9.0, "c192": 1.6, "c3840": 1.625}]
    (tmp_path / "context_use.json").write_text(json.dumps({"meta": {"contexts": [0, 64, 192, 3840]}, "rows": ctx}))
    lines = tables.current_models_table(tmp_path).splitlines()
    assert lines[0].endswith("| ppl@4096 (seed 0) | loss with 0 / 192 / 3840 characters of context |"), lines[0]
    assert lines[2:] == ["| rope | 4.89 / 4.79 / 4.83 | 48.90 | 1.500 / 1.900 / 3.700 |",
                         "| irope | 5.12 / 5.06 | 51.20 | - |",
                         "| irope (no temp) | - | - | 1.600 / 1.600 / 1.625 |"], lines
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {"lengths": [256]}, "rows": ex[:3]}))
    (tmp_path / "context_use.json").write_text(json.dumps({"meta": {"contexts": [0]}, "rows": []}))
    assert tables.current_models_table(tmp_path) == "", "plain RoPE alone is not a current-models table"


def test_field_table_applies_its_rules(tmp_path):
    """docs/field.md's table: the anchors first, then the field's text rows; seed 0's ppl with the mean of
    the seeds run; breaks by the glance table's rule; the copy twin's worst exact match at d <= 200 and
    each farther d with its interval; a scaled or other-length row is left out."""
    ex = [{"variant": n, "train_len": L, "ppl_256": a, "ppl_4096": b} for n, L, a, b in
          (("fox", 256, 4.80, 5.76), ("fox [seed1]", 256, 4.90, 5.0), ("rope", 256, 5.0, 6.01),
           ("rope+yarn", 256, 5.0, 5.5), ("rope_ft_yarn", 1024, 5.0, 5.0))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex}))
    (tmp_path / "context_use.json").write_text(json.dumps({"meta": {}, "rows": [{"variant": "fox",
                                                                                  "effective_context": 960}]}))
    cells = {32: (0.75, 0.6, 0.85), 200: (0.5, 0.4, 0.6), 512: (0.125, 0.07, 0.2)}
    ret = [{"variant": "fox_copy", "distance": d, "exact": e, "exact_lo": lo, "exact_hi": hi}
           for d, (e, lo, hi) in cells.items()]
    (tmp_path / "retrieval.json").write_text(json.dumps({"meta": {}, "rows": ret}))
    lines = [ln for ln in tables.field_table(tmp_path).splitlines() if ln.startswith("| ")]
    assert lines[0].endswith("| d = 512 |"), lines[0]
    body = {ln.split(" | ")[0][2:]: ln for ln in lines[1:]}
    assert list(body) == ["rope", "fox"], body
    assert body["fox"] == "| fox | 4.80 (4.85 of 2) | 5.76 | no | 960 | fox_copy | 50% [40, 60] | 12% [7, 20] |", body["fox"]
    assert body["rope"] == "| rope | 5.00 | 6.01 | yes | - | - | - | - |", body["rope"]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex[2:]}))
    assert tables.field_table(tmp_path) == "", "no field row: no table"


def test_field_anchor_table_sets_seed_0_beside_seed_0_and_keeps_the_recipe_table_to_its_schemes(tmp_path):
    """docs/field.md's anchor table: rope and alibi first (the recipe's gap), then each field scheme both sides
    have; ours / theirs at 256 computed from the two files; another seed is ignored; and docs/recipe.md's
    table takes from the anchor only the schemes its ablation has (no t5 column)."""
    ex = [{"variant": n, "ppl_256": a, "ppl_4096": b} for n, a, b in
          (("rope", 5.0, 30.0), ("t5", 5.2, 11.0), ("fox", 4.9, 4.8), ("xpos", 4.9, 5.1))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex}))
    anchor = [{"scheme": s, "seed": seed, "ppl@256": a, "ppl@4096": b} for s, seed, a, b in
              (("rope", 0, 4.0, 40.0), ("t5", 0, 4.0, 8.0), ("t5", 1, 9.0, 9.0), ("fox", 0, 4.9, 4.7))]
    (tmp_path / "anchor_xtransformers.json").write_text(json.dumps(
        {"meta": {"lengths": [256, 4096], "tokens": 65536}, "rows": anchor}))
    lines = [ln for ln in tables.field_anchor_table(tmp_path).splitlines() if ln.startswith("| ")]
    body = {ln.split(" | ")[0][2:]: ln.split(" | ") for ln in lines[1:]}
    assert list(body) == ["rope", "t5", "fox"], list(body)
    assert body["t5"][1:6] == ["5.20", "4.00", "1.300", "11.00", "8.00"], body["t5"]
    assert body["rope"][1:6] == ["5.00", "4.00", "1.250", "30.00", "40.00"], body["rope"]
    (tmp_path / "anchor_xtransformers.json").write_text(json.dumps(
        {"meta": {"lengths": [256, 4096], "tokens": 65536}, "rows": anchor[:1]}))
    assert tables.field_anchor_table(tmp_path) == "", "no field scheme in the anchor: no table"
    (tmp_path / "recipe_ablation.json").write_text(json.dumps({"meta": {"lengths": [256, 4096]}, "rows": [
        {"knob": "baseline", "scheme": "rope", "ppl@256": 5.0, "ppl@4096": 30.0}]}))
    (tmp_path / "anchor_xtransformers.json").write_text(json.dumps(
        {"meta": {"lengths": [256, 4096], "tokens": 65536}, "rows": anchor}))
    head = tables.recipe_table(tmp_path).splitlines()[0]
    assert "t5" not in head and "fox" not in head and "rope ppl@256" in head, head


def test_field_cost_table_reads_the_benchmark_at_its_longest_length_and_divides_by_ropes(tmp_path):
    """docs/field.md's cost table: time and memory at the benchmark's longest length over RoPE's, the
    parameters of the seed-0 row, the code lines of the file (all of a shared one); a scheme the benchmark lacks is left out; no field
    scheme in the benchmark: no table."""
    ex = [{"variant": n, "params_added": p, "pos_file_loc": loc} for n, p, loc in
          (("rope", 0, 76), ("alibi", 0, 44), ("kerple", 8, 100), ("kerple [seed1]", 9, 1), ("fox", 2064, 60))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex}))
    times = [[s, L, t] for s, t in (("rope", 0.2), ("kerple", 0.5), ("alibi", 0.1)) for L in (512, 4096)]
    times += [["kerple", 512, 9.0]]  # a shorter length is not read
    memory = [["rope", "forward 4096", 80 * 2 ** 20], ["kerple", "forward 4096", 100 * 2 ** 20]]
    bench = {"config": {"schemes": ["rope", "alibi", "kerple"], "lengths": [512, 4096]}, "machine": "cpu (x86_64); 2 CPUs",
             "times": times, "memory": memory}
    (tmp_path / "benchmark.json").write_text(json.dumps(bench))
    lines = [ln for ln in tables.field_cost_table(tmp_path).splitlines() if ln.startswith("| ")]
    body = {ln.split(" | ")[0][2:]: ln.split(" | ") for ln in lines[1:]}
    assert list(body) == ["rope", "alibi", "kerple"], list(body)  # fox: not benchmarked
    own = str(EC.code_lines(EC.HERE / "field" / "field_relbias.py", only={"KerpleLog"}))  # a file t5, kerple and fire share
    assert body["kerple"][1:] == ["field_relbias.py", own, "8", "500", "2.50", "100", "1.25 |"], body["kerple"]
    assert body["rope"][2] == str(EC.code_lines(EC.HERE / "pos_rope.py")), body["rope"]  # plain RoPE, before the fence
    assert body["alibi"][4:] == ["100", "0.50", "-", "- |"], body["alibi"]  # no memory measured: a dash
    bench["config"]["schemes"] = ["rope", "alibi"]
    (tmp_path / "benchmark.json").write_text(json.dumps(bench))
    assert tables.field_cost_table(tmp_path) == "", "no field scheme in the benchmark: no table"
