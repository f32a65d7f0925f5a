"""What every benchmark report records about the code it ran."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import benchmarks.common


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def _repo_with_benchmarks(tmp_path: Path) -> Path:
    """A git checkout holding a copy of ``benchmarks/common.py``, committed once."""
    repo = tmp_path / "checkout"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(benchmarks.common.__file__, repo / "benchmarks" / "common.py")
    (repo / "notes.txt").write_text("first\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_checkout_commit_is_head_and_dirty_only_for_tracked_changes(tmp_path):
    repo = _repo_with_benchmarks(tmp_path)
    head = _git(repo, "rev-parse", "HEAD")
    assert benchmarks.common.checkout_commit(repo) == head
    (repo / "untracked.txt").write_text("new\n")
    assert benchmarks.common.checkout_commit(repo) == head
    (repo / "notes.txt").write_text("changed\n")
    assert benchmarks.common.checkout_commit(repo) == head + "-dirty"
    outside = tmp_path / "outside"
    outside.mkdir()
    assert benchmarks.common.checkout_commit(outside) == "unknown"


def test_a_long_run_records_the_commit_it_started_on(tmp_path):
    # The benchmark process loads its code, then the checkout moves on (a new commit) and the run rewrites
    # a tracked report of its own: the commit it records is still the one whose code it runs.
    repo = _repo_with_benchmarks(tmp_path)
    started = _git(repo, "rev-parse", "HEAD")
    script = textwrap.dedent(
        """
        import importlib.util, subprocess, sys
        from pathlib import Path
        repo = Path(sys.argv[1])
        spec = importlib.util.spec_from_file_location("copied_common", repo / "benchmarks" / "common.py")
        common = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(common)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
        (repo / "notes.txt").write_text("second\\n")
        subprocess.run([*git, "commit", "-q", "-am", "second"], cwd=repo, check=True)
        (repo / "notes.txt").write_text("the run's own report\\n")
        print(common.git_commit(), common.git_commit(short=True))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(repo)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [started, started[:12]]
    assert _git(repo, "rev-parse", "HEAD") != started
