"""What every entry-point script does with its command line: --help exits 0 and lists every flag;
output folders that cannot be written are refused before any work; an explicit 0 or empty value is
checked, not replaced by the default. Each script's main(argv) runs in this process (the --quick
checkpoints they read: conftest.quick_repo)."""
import argparse
import re
from pathlib import Path

import pytest

SCRIPTS = ["train_compare.py", "extrapolation_test.py", "long_context_test.py", "experiments/benchmark.py", "experiments/breakage_test.py",
           "visualize_rope.py", "experiments/recipe_ablation.py", "experiments/copy_calibration.py"]


def test_help_exits_0_and_lists_every_flag(monkeypatch, capsys):
    """Each script's main(["--help"]) exits 0 and its help names every long flag the script gives
    argparse.add_argument (recorded while it builds its parser), --quick among them."""
    import importlib
    flags, add = [], argparse.ArgumentParser.add_argument

    def recording_add(self, *names, **kw):
        flags.extend(n for n in names if n.startswith("--"))
        return add(self, *names, **kw)
    monkeypatch.setattr(argparse.ArgumentParser, "add_argument", recording_add)
    problems = []
    for script in SCRIPTS:
        main = importlib.import_module(script.removesuffix(".py").replace("/", ".")).main
        flags.clear()
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            main(["--help"])
        out, mine = capsys.readouterr().out, [f for f in flags if f != "--help"]
        if e.value.code not in (None, 0):
            problems.append(f"{script} --help exited {e.value.code}")
            continue
        if "--quick" not in mine:
            problems.append(f"{script}: defines no --quick ({mine})")
        missing = [f for f in mine if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", out)]
        if missing:
            problems.append(f"{script} --help does not mention {missing}")
    assert not problems, "\n".join(problems)


def test_output_folders_that_cannot_be_written_are_refused_first(quick_ck, tmp_path, refused):
    from experiments import benchmark
    from experiments import breakage_test
    import extrapolation_test
    import long_context_test
    import train_compare
    import visualize_rope
    (tmp_path / "file.txt").write_text("a file, not a folder")
    bad = [str(tmp_path / "file.txt" / "out")] + (["/proc/nope"] if Path("/proc/self").is_dir() else [])
    for folder in bad:
        for main, argv in ((extrapolation_test.main, ["--quick", "--ckpt-dir", str(quick_ck), "--results", folder]),
                           (long_context_test.main, ["--quick", "--ckpt-dir", str(quick_ck), "--results", folder]),
                           (visualize_rope.main, ["--only", "1", "--out", folder]),
                           (train_compare.main, ["--quick", "--out", str(tmp_path / "ck"), "--results", folder]),
                           (train_compare.main, ["--quick", "--out", folder]),
                           (benchmark.main, ["--quick", "--results", folder]),
                           (breakage_test.main, ["--quick", "--out", folder])):
            msg = refused(main, argv)
            assert folder in msg and ("not a folder" in msg or "cannot write" in msg), msg
    assert not (tmp_path / "ck").exists(), "train_compare.py trained before it found that --results is unwritable"


def test_explicit_zero_or_empty_is_checked_not_replaced_by_the_default(quick_ck, tmp_path, refused):
    import extrapolation_test
    import long_context_test
    from experiments import recipe_ablation
    import visualize_rope
    res = ["--results", str(tmp_path / "r")]
    assert "--tokens must be positive, got 0" in refused(extrapolation_test.main,
                                                         ["--preset", "preview", "--tokens", "0", *res])
    assert "--lengths" in refused(extrapolation_test.main, ["--quick", "--lengths", "", *res])
    for flag in ("--spans", "--trials", "--copy-trials", "--target-len"):
        msg = refused(long_context_test.main, ["--quick", "--ckpt-dir", str(quick_ck), flag, "0", *res])
        assert "must be positive" in msg and "0" in msg.split("got ")[1].split(", "), f"{flag} 0: {msg}"
    assert "--contexts" in refused(long_context_test.main, ["--quick", "--ckpt-dir", str(quick_ck), "--contexts", "",
                                                            *res])
    assert "--lengths" in refused(recipe_ablation.main, ["--quick", "--lengths", "", *res])
    for flag in ("--long-len", "--length", "--windows"):
        assert f"{flag} 0" in refused(visualize_rope.main, ["--only", "1", flag, "0", "--out", str(tmp_path)])
    assert not (tmp_path / "r").exists(), "a refused run wrote results"
