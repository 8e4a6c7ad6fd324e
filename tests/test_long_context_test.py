"""long_context_test.py: the rows it builds (make_jobs, the temperature's rows), its tables (exact match's
interval from the count), the formats run's merges and redraws, its answers to bad input; on the
shared --quick checkpoints (conftest.quick_repo), its outputs."""
import csv
import json
from pathlib import Path

import pytest
import torch

import long_context_test as LC
import tiny_lm
from lab import checkpoint_io
from lab import corpora
from lab.copy_mixture import FORMATS
from lab.long_context import clopper_pearson

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TEXT = 35  # ids below this are neither digits nor uppercase: text made of them holds no key character


def test_make_jobs_rows():
    s = {"scalings": ["yarn"], "fixed_scalings": ["yarn@16"], "retrieval_scalings": ["linear"]}
    jobs = {row: (name, scaling, m) for row, name, scaling, m in LC.make_jobs(["rope", "rope_copy", "irope_copy"], s, None)}
    assert jobs["rope+yarn@16"] == ("rope", "yarn@16", {"context"})
    assert jobs["rope_copy+linear"] == ("rope_copy", "linear", {"retrieval"})
    assert jobs["irope_copy (no temp)"] == ("irope_copy", None, {"retrieval"}), "irope's temperature-off row"
    assert "rope (no temp)" not in jobs


def test_seed_rows_are_the_copy_twins_found_in_each_seed_folder(tmp_path):
    for d in ("seed1", "seed2"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "kerple_copy.pt").write_bytes(b"")
    (tmp_path / "seed1" / "kerple.pt").write_bytes(b"")
    paths = {}
    jobs = LC.seed_jobs(["kerple", "kerple_copy", "t5_copy"], [(tmp_path / "seed1", "seed1"), (tmp_path / "seed2", "seed2")],
                        paths)
    assert jobs == [("kerple_copy [seed1]", "kerple_copy", None, {"retrieval"}),
                    ("kerple_copy [seed2]", "kerple_copy", None, {"retrieval"})], jobs
    assert paths["kerple_copy [seed2]"] == tmp_path / "seed2" / "kerple_copy.pt"


def test_seed_table_lists_every_seed_and_their_range_apart_from_the_main_tables():
    rows = [{"variant": n, "family": "copy", "train_len": 256, "distance": 3900, "exact": e, "trials": 128,
             "per_char": e, "gain": 1.0, "gain_lo": 0.9, "gain_hi": 1.1}
            for n, e in (("kerple_copy", 93 / 128), ("kerple_copy [seed1]", 0.5), ("kerple_copy [seed2]", 0.625),
                         ("t5_copy", 42 / 128))]
    _, md = LC.retrieval_tables(rows, {"distances": [3900], "key_len": 10, "trials": 32, "copy_trials": 128})
    main, seeds = md.split("**Exact match of each seed")
    assert "[seed1]" not in main and "| t5_copy |" in main
    assert "| kerple_copy | 3 | 73 / 50 / 62 (50-73) |" in seeds, seeds
    assert "t5_copy" not in seeds, "a row with one seed gets no seeds line"


def test_tables_take_exact_match_intervals_from_the_count():
    """retrieval_tables prints Clopper-Pearson from exact x trials, whatever exact_lo/hi the JSON holds."""
    def row(v, d, exact, trials):
        return {"variant": v, "family": "copy", "train_len": 256, "distance": d, "trials": trials, "exact": exact,
                "exact_lo": 0.5, "exact_hi": 0.5, "per_char": 0.9, "per_char_lo": 0.8, "per_char_hi": 1.0,
                "gain": 3.0, "gain_lo": 2.9, "gain_hi": 3.1}
    rows = [row("rope_copy", 32, 0.0, 32), row("rope_copy", 64, 0.8516, 128)]
    _, md = LC.retrieval_tables(rows, {"distances": [32, 64], "key_len": 10, "trials": 32, "copy_trials": 128,
                                       "far_from": 512})
    lo, hi = clopper_pearson(109, 128)
    want = f"| rope_copy | copy curriculum, 256 | 0% [0, 11] | 85% [{100 * lo:.0f}, {100 * hi:.0f}] |"
    assert want in md, f"want {want!r} in\n{md}"
    assert "Clopper-Pearson" in md


def test_irope_copy_notemp_differs_only_in_the_temperature():
    import dataclasses
    from lab import variants as V
    kw = dict(vocab_size=len(VOCAB), n_layer=4, n_head=2, n_embd=16, max_len=512)
    a, b = (V.build_variant(n, kw, V.TrainConfig(), 0, None)[0] for n in ("irope_copy", "irope_copy_notemp"))
    ca, cb = dataclasses.asdict(a.cfg), dataclasses.asdict(b.cfg)
    assert [k for k in ca if ca[k] != cb[k]] == ["attn_temperature_tuning"] and ca["attn_temperature_tuning"], (ca, cb)
    assert V.is_copy("irope_copy_notemp") and "irope_copy_notemp" in V.FAMILIES["copy"]
    assert V.COPY_OF["irope_copy_notemp"] == "irope", "trained on the copy curriculum for COPY_STEPS like irope_copy"
    s = {"scalings": [], "fixed_scalings": [], "retrieval_scalings": []}
    rows = [j[0] for j in LC.make_jobs(["irope_copy_notemp", "irope_copy", "irope_global"], s, "retrieval")]
    assert rows == ["irope_global", "irope_copy", "irope_copy (no temp)", "irope_copy_notemp",
                    "irope_copy_notemp (temp on)"], rows


def test_temp_on_row_switches_the_factor_on():
    """The "(temp on)" row's model equals the plain one below the floor (factor exactly 1 before
    position floor - 1) and differs beyond it; "(no temp)" switches it back off."""
    import copy as copy_module
    from lab import variants as V
    kw = dict(vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=16, max_len=512)
    plain = V.build_variant("irope_copy_notemp", kw, V.TrainConfig(), 0, None)[0].eval()
    on = copy_module.deepcopy(plain)
    LC.switch_temperature(on, "irope_copy_notemp (temp on)")
    assert on.cfg.attn_temperature_tuning and not plain.cfg.attn_temperature_tuning
    floor = plain.cfg.temperature_floor
    x = torch.randint(0, len(VOCAB), (2, 3 * floor))
    with torch.no_grad():
        a, b = plain(x).logits, on(x).logits                                      # (2, 3 floor, V) each
    below = (a[:, :floor - 1] - b[:, :floor - 1]).abs().max().item()
    beyond = (a[:, floor:] - b[:, floor:]).abs().amax(dim=(0, 2))                 # (2 floor,)
    assert below == 0.0, f"below the floor the factor is 1, but the logits differ by {below:.2e}"
    assert bool((beyond > 1e-6).all()), f"beyond the floor the factor changed nothing somewhere: {beyond.min():.2e}"
    LC.switch_temperature(on, "irope_copy (no temp)")
    assert not on.cfg.attn_temperature_tuning


@pytest.fixture(scope="session")
def quick_ckpts(tmp_path_factory, val_text):
    """Random --quick-sized rope_copy and alibi_copy checkpoints on the default corpus: what
    long_context_test.main loads (no training: the files, merges and tables are under test)."""
    from dataclasses import asdict
    from lab import variants as V
    _, vocab = val_text
    train, val, _ = corpora.load_corpus(None)
    d = tmp_path_factory.mktemp("formats_ck")
    for name in ("rope_copy", "alibi_copy"):
        model = V.build_variant(name, {"vocab_size": len(vocab), **V.QUICK_MODEL}, V.TrainConfig(), 0, None)[0]
        extra = {"train_config": asdict(V.TrainConfig(**V.QUICK_TRAIN)), "variant": name, "data": "copy",
                 "corpus": corpora.corpus_fingerprint(train + val)}
        checkpoint_io.save_checkpoint(d / f"{name}.pt", model, vocab, 0, {}, extra)
    return d


def test_quick_formats_run_writes_merges_and_redraws(quick_ckpts, tmp_path):
    res = tmp_path / "res"
    run = lambda *a: LC.main(["--quick", "--ckpt-dir", str(quick_ckpts), "--results", str(res), "--only", "formats",
                              *a])
    assert run("--variants", "rope_copy") == 0
    files = [res / f"retrieval_formats.{e}" for e in ("json", "csv", "md")]
    assert all(f.is_file() for f in files) and not (res / "retrieval.json").exists(), sorted(res.iterdir())
    data = json.loads(files[0].read_text())
    n_d = len(data["meta"]["format_distances"])
    assert len(data["rows"]) == 2 * len(FORMATS) * n_d, "rope_copy and rope_copy+yarn, each format and distance"
    assert [r["rows"] for r in data["meta"]["runs"]] == [["rope_copy", "rope_copy+yarn"]]
    md = files[2].read_text()
    assert md.count("| rope_copy+yarn | verse |") == 3 and "| rope_copy |" in md, md
    # a file written before runs were recorded: its rows get one record from its meta
    del data["meta"]["runs"]
    files[0].write_text(json.dumps(data))
    assert run("--variants", "alibi_copy") == 0
    runs = json.loads(files[0].read_text())["meta"]["runs"]
    assert [r["rows"] for r in runs] == [["rope_copy", "rope_copy+yarn"], ["alibi_copy"]] and "note" in runs[0], runs
    assert run("--variants", "rope_copy") == 0  # replaces the old record's rows: that record goes
    runs = json.loads(files[0].read_text())["meta"]["runs"]
    assert [r["rows"] for r in runs] == [["alibi_copy"], ["rope_copy", "rope_copy+yarn"]], runs
    assert all(r["seconds"] >= 0 and r["peak_rss_gib"] > 0 and r["date"] for r in runs), runs
    before = [f.read_text() for f in files]
    with pytest.raises(SystemExit) as e:
        run("--variants", "alibi_copy", "--format-trials", "4")
    assert e.value.code == 2 and [f.read_text() for f in files] == before, "other settings must not merge"
    files[1].unlink()
    files[2].unlink()
    assert LC.main(["--redraw", "--results", str(res)]) == 0
    assert [f.read_text() for f in files] == before, "--redraw does not give back the same tables"


def test_committed_retrieval_json_without_runs_redraws_and_merges():
    """A retrieval.json from before meta["runs"] (the committed one with its records taken out): its
    tables still build (exact match's interval from its count), and a partial run merged into it
    keeps one record for the rows it had."""
    path = Path(__file__).resolve().parent.parent / "results" / "retrieval.json"
    old = json.loads(path.read_text())
    old["meta"].pop("runs", None)
    wide, md = LC.retrieval_tables(old["rows"], old["meta"])
    assert len(wide) == len({r["variant"] for r in old["rows"]}) and "Clopper-Pearson" in md
    runs = LC.merge_runs(old, [{"variant": "rope_copy"}])
    assert len(runs) == 1 and runs[0]["run_seconds"] == old["meta"]["seconds"] and "note" in runs[0], runs
    assert "rope_copy" not in runs[0]["rows"] and "alibi_copy" in runs[0]["rows"], runs[0]["rows"]


def test_bad_format_settings_exit_2_before_any_work(quick_ckpts, tmp_path, capsys):
    base = ["--quick", "--ckpt-dir", str(quick_ckpts), "--results", str(tmp_path / "r"), "--variants", "rope_copy"]
    for extra, words in ((["--only", "formats", "--format-distances", "8,20"], "at least 16"),
                         (["--only", "formats", "--format-trials", "1"], "--format-trials must be at least 2"),
                         (["--only", "context"], "nothing to measure")):
        with pytest.raises(SystemExit) as e:
            LC.main(base + extra)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and words in err and "\n" not in err, (extra, err)
    assert not (tmp_path / "r").exists(), "a refused run wrote results"


# ----------------------------------------------------------------------------- the --quick run

def test_long_context_outputs(quick_ck, quick_repo):
    res = quick_repo.res
    ctx = list(csv.DictReader(open(res / "context_use.csv")))
    names = [r["variant"] for r in ctx]
    for v in ("none", "learned", "sin", "rope", "alibi", "rope+yarn", "rope_ft_yarn", "rope_ft_none", "alibi_ft"):
        assert v in names, f"{v} missing from context_use.csv"
    meta = json.loads((res / "context_use.json").read_text())["meta"]
    for r in ctx:
        for c in meta["contexts"]:
            assert 0 < float(r[f"c{c}"]) < 10, r
        assert int(r["effective_context"]) in meta["contexts"]
    ret = list(csv.DictReader(open(res / "retrieval.csv")))
    assert {r["variant"] for r in ret} >= {"none", "rope", "alibi", "rope_ft_yarn", "alibi_ft"}
    dists = json.loads((res / "retrieval.json").read_text())["meta"]["distances"]
    for r in ret:
        for dd in dists:
            assert -10 < float(r[f"gain_{dd}"]) < 10 and 0 <= float(r[f"exact_{dd}"]) <= 1, r
    for f in ("context_use.png", "retrieval.png", "context_use.md", "retrieval.md"):
        assert (res / f).stat().st_size > 200, f
    assert {"rope+yarn@16", "rope+linear@16"} <= set(names), "the fixed-factor rows of context use"
    assert {"rope_copy", "rope_copy+yarn", "irope_copy", "irope_copy (no temp)", "rope_copy_ft_yarn"} <= \
        {r["variant"] for r in ret}, "the copy family's rows"
    rmeta = json.loads((res / "retrieval.json").read_text())["meta"]
    assert rmeta["key_alphabet"] == "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for r in ret:
        for dd in dists:
            assert 0 <= float(r[f"per_char_{dd}"]) <= 1, r
    rows = json.loads((res / "retrieval.json").read_text())["rows"]
    for r in rows:  # 128 windows (copy_trials) for every copy cell and every cell from far_from on; text below: 32
        many = r["family"] == "copy" or r["distance"] >= rmeta["far_from"]
        assert r["trials"] == rmeta["copy_trials" if many else "trials"], r
    ck = torch.load(quick_ck / "rope_copy.pt", weights_only=True)
    assert ck["losses"]["probe"] and all(0 <= v <= 1 for p in ck["losses"]["probe"] for pe in p.values() for v in pe), \
        "the copy family's passkey probe is missing from its training history"


def test_bad_input_long_context(quick_ck, tmp_path, refused):
    base = ["--quick", "--ckpt-dir", str(quick_ck), "--results", str(tmp_path / "r")]
    msg = refused(LC.main, [*base, "--contexts", "0,48,16"])
    assert "increasing" in msg
    msg = refused(LC.main, [*base, "--variants", "rope,zzz"])
    assert "zzz" in msg and "known" in msg
    msg = refused(LC.main, [*base, "--distances", "24,900000"])
    assert "validation text" in msg
    msg = refused(LC.main, [*base, "--contexts", "0,16,48,1000", "--variants", "learned"])
    assert "learned table" in msg
    corpus = tmp_path / "other.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ. " * 1500)
    msg = refused(LC.main, [*base, "--corpus", str(corpus), "--variants", "rope"])
    assert "another corpus" in msg
    corpus.write_text("the quick brown fox jumps over the lazy dog 0123456789. " * 1500)
    msg = refused(LC.main, [*base, "--corpus", str(corpus), "--variants", "rope", "--only", "retrieval"])
    assert "corpus lacks" in msg and "ABC" in msg, "a corpus without the key letters is named as such"
    assert not (tmp_path / "r").exists(), "a failed run wrote results"
