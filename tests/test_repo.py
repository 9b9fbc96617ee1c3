"""The local repository checks before a submit, on real git repositories in temporary directories.

Each test gets a bare repository as the remote (reached through a ``file://`` URL) and a working clone
with a committed, pushed package ``pkg/train.py``. Identity comes from ``-c user.name=...`` so the tests
do not depend on the machine's git configuration.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roach.errors import RoachError, TransportError, UsageError
from roach.launch.repo import RepoInfo, commit_subject, inspect_repo, sanitize_name
from roach.launch.target import (
    check_calls,
    check_target,
    checked_module,
    checked_target,
    module_path_candidates,
    parse_target,
    target_params,
)

TRAIN = "def train(run, lr):\n    return lr\n\n\ndef evaluate(run):\n    pass\n"


def git(cwd: Path, *args: str) -> str:
    argv = [
        "git",
        "-c",
        "user.name=Roach Test",
        "-c",
        "user.email=roach@example.invalid",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "commit.gpgsign=false",
        "-C",
        str(cwd),
        *args,
    ]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def commit(cwd: Path, message: str, **files: str) -> str:
    for name, text in files.items():
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def short(cwd: Path, rev: str = "HEAD") -> str:
    return git(cwd, "rev-parse", "--short", rev)


def make_repo(base: Path, name: str = "work") -> tuple[Path, Path]:
    """(bare remote, working clone with pkg/train.py committed and pushed to origin/main)."""
    base.mkdir(parents=True, exist_ok=True)
    remote = base / "remote.git"
    git(base, "init", "-q", "--bare", str(remote))
    work = base / name
    git(base, "clone", "-q", remote.as_uri(), str(work))
    git(work, "checkout", "-q", "-b", "main")
    commit(work, "Add train", **{"pkg/__init__.py": "", "pkg/train.py": TRAIN, ".gitignore": "*.log\n"})
    git(work, "push", "-q", "-u", "origin", "main")
    return remote, work


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No repository above tmp_path may be found, and the user's git config must not leak in.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)[1]


# ------------------------------------------------------------------------------------ inspect_repo


def test_clean_pushed_repo_is_described(tmp_path: Path) -> None:
    remote, work = make_repo(tmp_path)
    info = inspect_repo(work / "pkg")  # any directory inside the working tree will do
    assert info == RepoInfo(
        root=work.resolve(),
        name="work",
        commit=git(work, "rev-parse", "HEAD"),
        branch="main",
        upstream="origin/main",
        remote="origin",
        url=remote.as_uri(),
    )
    assert re.fullmatch(r"[0-9a-f]{40}", info.commit)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.commit = "x"  # type: ignore[misc]


def test_plain_path_remote_is_allowed(tmp_path: Path) -> None:
    remote, work = make_repo(tmp_path)
    git(work, "remote", "set-url", "origin", str(remote))
    assert inspect_repo(work).url == str(remote)


def test_modified_tracked_file_is_refused_by_name(repo: Path) -> None:
    (repo / "pkg" / "train.py").write_text(TRAIN + "# edited\n")
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    assert "has 1 uncommitted change(s)" in err.value.message
    assert f"clones commit {short(repo)} and would not see them" in err.value.message
    assert "  modified: pkg/train.py" in err.value.message
    assert "commit them" in err.value.hint and "git stash -u" in err.value.hint and ".gitignore" in err.value.hint


def test_staged_change_is_refused(repo: Path) -> None:
    (repo / "pkg" / "new.py").write_text("x = 1\n")
    git(repo, "add", "pkg/new.py")
    with pytest.raises(UsageError, match=r"  staged added: pkg/new.py"):
        inspect_repo(repo)


def test_staged_and_unstaged_deletion_and_rename(repo: Path) -> None:
    git(repo, "mv", "pkg/train.py", "pkg/trainer.py")
    (repo / "pkg" / "__init__.py").unlink()
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    assert "  staged renamed: pkg/train.py -> pkg/trainer.py" in err.value.message
    assert "  deleted: pkg/__init__.py" in err.value.message


def test_untracked_file_is_refused_by_name(repo: Path) -> None:
    (repo / "notes.txt").write_text("todo\n")
    (repo / "data").mkdir()
    (repo / "data" / "x.csv").write_text("1\n")
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    assert "has 2 uncommitted change(s)" in err.value.message
    assert "  untracked: notes.txt" in err.value.message
    assert "  untracked: data/x.csv" in err.value.message  # each file, not just the directory


def test_many_dirty_files_are_truncated(repo: Path) -> None:
    for i in range(25):
        (repo / f"f{i:02d}.txt").write_text("x")
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    lines = err.value.message.splitlines()
    assert sum(line.startswith("  untracked: ") for line in lines) == 20
    assert lines[-1] == "  ... and 5 more"


def test_ignored_untracked_file_is_accepted(repo: Path) -> None:
    (repo / "train.log").write_text("loss 0.1\n")
    assert inspect_repo(repo).commit == git(repo, "rev-parse", "HEAD")


def test_submodule_changes_are_ignored(tmp_path: Path) -> None:
    _, sub = make_repo(tmp_path / "s")
    _, work = make_repo(tmp_path / "w")
    git(work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub")
    commit(work, "Add submodule")
    git(work, "push", "-q")
    (work / "vendor" / "sub" / "pkg" / "train.py").write_text("changed\n")
    (work / "vendor" / "sub" / "scratch.txt").write_text("x\n")
    assert inspect_repo(work).branch == "main"


def test_unpushed_commit_is_refused_with_sha_and_subject(repo: Path) -> None:
    commit(repo, "Tune the learning rate", **{"pkg/train.py": TRAIN + "LR = 3e-4\n"})
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    sha = short(repo)
    assert err.value.message.startswith(
        f"commit {sha} (Tune the learning rate) is not on origin/main (as last fetched)"
    )
    assert f"  {sha} Tune the learning rate" in err.value.message
    assert err.value.hint == "run `git push` (to origin/main), then submit again"
    git(repo, "push", "-q")
    assert inspect_repo(repo).commit == git(repo, "rev-parse", "HEAD")


def test_diverged_branch_hints_pull_rebase(tmp_path: Path) -> None:
    remote, work = make_repo(tmp_path)
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", remote.as_uri(), str(other))
    commit(other, "Someone else's change", **{"README": "hi\n"})
    git(other, "push", "-q")
    git(work, "fetch", "-q")
    commit(work, "Mine", **{"pkg/train.py": TRAIN + "# mine\n"})
    with pytest.raises(UsageError) as err:
        inspect_repo(work)
    assert f"commit {short(work)} (Mine) is not on origin/main" in err.value.message
    assert err.value.hint == "origin/main has 1 commit(s) you do not have: `git pull --rebase`, then `git push`"


def test_no_upstream_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    assert err.value.message == "branch 'feature' has no upstream, so roach cannot tell where the job clones it from"
    assert err.value.hint == "push it and set the upstream: git push -u origin feature"


def test_upstream_never_fetched_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "config", "branch.feature.remote", "origin")
    git(repo, "config", "branch.feature.merge", "refs/heads/feature")
    with pytest.raises(UsageError, match=r"tracks 'origin/feature', which does not exist locally") as err:
        inspect_repo(repo)
    assert err.value.hint == "push it: git push -u origin feature"


def test_local_upstream_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature", "--track", "main")
    with pytest.raises(UsageError, match=r"the upstream of branch 'feature' is 'main', a local branch"):
        inspect_repo(repo)


def test_detached_head_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(UsageError) as err:
        inspect_repo(repo)
    assert err.value.message.startswith(f"HEAD of {str(repo.resolve())!r} is detached (at {short(repo)})")
    assert "git push -u origin <branch>" in err.value.hint


def test_repo_without_commits_is_refused(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "empty")
    with pytest.raises(UsageError, match="has no commit yet"):
        inspect_repo(tmp_path / "empty")


def test_not_a_repo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError) as err:
        inspect_repo(tmp_path / "plain")
    assert err.value.message.startswith(f"{str(tmp_path / 'plain')!r} is not inside a git repository")
    assert "git init" in err.value.hint and "repo_root=" in err.value.hint
    assert err.value.exit_code == 2


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"repo_root '.*nowhere' is not a directory"):
        inspect_repo(tmp_path / "nowhere")


def test_bare_repository_is_refused(tmp_path: Path) -> None:
    remote, _ = make_repo(tmp_path)
    with pytest.raises(UsageError, match="has no git working tree") as err:
        inspect_repo(remote)
    assert "not a bare repository" in err.value.hint


def test_git_missing_becomes_transport_error(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-such-bin"))
    with pytest.raises(TransportError) as err:
        inspect_repo(repo)
    assert err.value.message == "git is not installed (or not on PATH)"
    assert err.value.argv[:2] == ("git", "-C")
    assert "apt-get install git" in err.value.hint


def test_git_hook_environment_does_not_redirect(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, other = make_repo(tmp_path / "o")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert inspect_repo(repo).root == repo.resolve()


def test_hostile_directory_name(tmp_path: Path) -> None:
    base = tmp_path / "my repo $(touch pwned) 'q\" `x`;"
    remote, work = make_repo(base, name="proj $(x) v2")
    info = inspect_repo(work)
    assert info.root == work.resolve()
    assert info.name == "proj_x_v2"
    assert info.url == remote.as_uri()
    check_target(info, "pkg.train:train")
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    (work / "odd\nname.txt").write_text("x")
    with pytest.raises(UsageError, match=re.escape("  untracked: 'odd\\nname.txt'")):
        inspect_repo(work)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("work", "work"),
        ("my repo", "my_repo"),
        ("proj $(x)", "proj_x_"),
        (".hidden", "hidden"),
        ("-opt", "opt"),
        ("$$$", "_"),
        ("...", "repo"),
        ("v1.2-rc_3", "v1.2-rc_3"),
        ("ünï", "_n_"),
    ],
)
def test_sanitize_name(raw: str, clean: str) -> None:
    assert sanitize_name(raw) == clean


def test_commit_subject(repo: Path) -> None:
    assert commit_subject(repo, "HEAD") == "Add train"


# ------------------------------------------------------------------------------------ check_target


def test_parse_target() -> None:
    assert parse_target("pkg.train:train") == ("pkg.train", "train")
    assert parse_target("train:main") == ("train", "main")


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("pkg.train", "it has no ':'"),
        ("pkg.train:train:x", "it needs exactly one ':'"),
        ("pkg..train:train", "'pkg..train' is not a dotted module name"),
        (":train", "'' is not a dotted module name"),
        ("pkg/train.py:train", "'pkg/train.py' is not a dotted module name"),
        ("pkg.class:train", "'pkg.class' is not a dotted module name"),
        ("pkg.train:Trainer.fit", "'Trainer.fit' is not the name of a function"),
        ("pkg.train:", "'' is not the name of a function"),
    ],
)
def test_bad_target_form_shows_expected_form(target: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_target(target)
    assert err.value.message.startswith(f"target {target!r} is not of the form 'package.module:function': {why}")
    assert err.value.hint == "e.g. 'pkg.train:train' runs function train defined in pkg/train.py"


def test_module_path_candidates() -> None:
    assert module_path_candidates("pkg.sub.mod:f") == [
        "pkg/sub/mod/__init__.py",
        "pkg/sub/mod.py",
        "src/pkg/sub/mod/__init__.py",
        "src/pkg/sub/mod.py",
    ]


def test_target_ok(repo: Path) -> None:
    info = inspect_repo(repo)
    assert check_target(info, "pkg.train:train") is None
    check_target(info, "pkg.train:evaluate")


def test_target_without_colon_is_refused(repo: Path) -> None:
    with pytest.raises(
        UsageError, match=r"target 'pkg.train' is not of the form 'package.module:function': it has no ':'"
    ):
        check_target(inspect_repo(repo), "pkg.train")


def test_missing_module_lists_tried_paths(repo: Path) -> None:
    info = inspect_repo(repo)
    with pytest.raises(UsageError) as err:
        check_target(info, "pkg.missing:train")
    assert err.value.message == (
        f"module 'pkg.missing' is not in commit {short(repo)}; tried:\n"
        "  pkg/missing/__init__.py\n  pkg/missing.py\n  src/pkg/missing/__init__.py\n  src/pkg/missing.py"
    )
    assert "check the module name in 'pkg.missing:train'" in err.value.hint


def test_missing_function_lists_valid_choices(repo: Path) -> None:
    with pytest.raises(UsageError) as err:
        check_target(inspect_repo(repo), "pkg.train:nosuch")
    assert err.value.message == (
        f"pkg/train.py at commit {short(repo)} has no top-level function 'nosuch'; "
        "its top-level functions are: train, evaluate"
    )
    assert err.value.hint == "name one of them, e.g. 'pkg.train:train'"


def test_misspelt_function_suggests_the_close_one(repo: Path) -> None:
    with pytest.raises(UsageError) as err:
        check_target(inspect_repo(repo), "pkg.train:trian")
    assert err.value.hint == "did you mean 'train'? name one of them, e.g. 'pkg.train:train'"


def test_nested_function_does_not_count(repo: Path) -> None:
    commit(
        repo,
        "Nested",
        **{"pkg/nest.py": "def outer():\n    def inner():\n        pass\n\nclass K:\n    def m(self):\n        pass\n"},
    )
    git(repo, "push", "-q")
    info = inspect_repo(repo)
    with pytest.raises(UsageError, match=r"(?m)has no top-level function 'inner'; its top-level functions are: outer$"):
        check_target(info, "pkg.nest:inner")
    with pytest.raises(UsageError, match=r"has no top-level function 'm'"):
        check_target(info, "pkg.nest:m")
    with pytest.raises(UsageError, match=r"'K' in pkg/nest.py is a class, not a function"):
        check_target(info, "pkg.nest:K")


def test_assignments_imports_and_conditional_defs_count(repo: Path) -> None:
    src = (
        "import os.path\nimport json as j\nfrom functools import partial as p, reduce\n"
        "from pkg.train import train\nfast = partial(train, lr=1)\na, (b, *c) = 1, (2, 3)\n"
        "typed: int = 3\ntry:\n    from x import y\nexcept ImportError:\n    def y():\n        pass\n"
        "if True:\n    async def go():\n        pass\nelse:\n    def other():\n        pass\n"
        "with open('f') as fh:\n    pass\nfor loop_var in []:\n    pass\n"
    )
    commit(repo, "Bindings", **{"pkg/bind.py": src})
    git(repo, "push", "-q")
    info = inspect_repo(repo)
    for name in [
        "os",
        "j",
        "p",
        "reduce",
        "train",
        "fast",
        "a",
        "b",
        "c",
        "typed",
        "y",
        "go",
        "other",
        "fh",
        "loop_var",
    ]:
        check_target(info, f"pkg.bind:{name}")
    with pytest.raises(UsageError, match=r"(?m)its top-level functions are: y, go, other$"):
        check_target(info, "pkg.bind:path")


def test_star_import_gets_the_benefit_of_the_doubt(repo: Path) -> None:
    commit(repo, "Star", **{"pkg/star.py": "from pkg.train import *\n"})
    git(repo, "push", "-q")
    check_target(inspect_repo(repo), "pkg.star:anything")


def test_module_with_no_functions(repo: Path) -> None:
    commit(repo, "Empty", **{"pkg/empty.py": "X = 1\n"})
    git(repo, "push", "-q")
    with pytest.raises(UsageError) as err:
        check_target(inspect_repo(repo), "pkg.empty:main")
    assert err.value.message.endswith("has no top-level function 'main'; its top-level functions are: (none)")
    assert err.value.hint == "name one of them, e.g. 'pkg.empty:function'"


def test_syntax_error_names_file_and_line(repo: Path) -> None:
    commit(repo, "Broken", **{"pkg/broken.py": "import os\n\ndef train(run:\n    pass\n"})
    git(repo, "push", "-q")
    with pytest.raises(UsageError) as err:
        check_target(inspect_repo(repo), "pkg.broken:train")
    assert re.match(rf"pkg/broken\.py:3: syntax error at commit {short(repo)}: ", err.value.message)
    assert "    def train(run:" in err.value.message
    assert err.value.hint == "fix line 3 of pkg/broken.py, commit and push, then submit again"


def test_warnings_in_user_code_are_not_printed(repo: Path, recwarn: pytest.WarningsRecorder) -> None:
    commit(repo, "Escapes", **{"pkg/esc.py": "P = '\\d+'\ndef main():\n    pass\n"})
    git(repo, "push", "-q")
    check_target(inspect_repo(repo), "pkg.esc:main")
    assert not [w for w in recwarn if issubclass(w.category, (SyntaxWarning, DeprecationWarning))]


def test_package_init_module(repo: Path) -> None:
    commit(repo, "Package module", **{"pkg/models/__init__.py": "def build():\n    pass\n"})
    git(repo, "push", "-q")
    check_target(inspect_repo(repo), "pkg.models:build")


def test_src_layout(tmp_path: Path) -> None:
    remote = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    work = tmp_path / "w"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    commit(work, "src layout", **{"src/lib/run.py": "def main():\n    pass\n"})
    git(work, "push", "-q", "-u", "origin", "HEAD")
    check_target(inspect_repo(work), "lib.run:main")


def test_symlinked_module_is_followed(repo: Path) -> None:
    (repo / "pkg" / "alias.py").symlink_to("train.py")
    (repo / "pkg" / "escape.py").symlink_to("/etc/hostname")
    commit(repo, "Symlinks")
    git(repo, "push", "-q")
    info = inspect_repo(repo)
    check_target(info, "pkg.alias:train")
    with pytest.raises(UsageError, match=r"pkg/escape.py is a symlink to '/etc/hostname', outside the repository"):
        check_target(info, "pkg.escape:x")


def test_module_is_checked_at_the_commit_not_the_working_tree(repo: Path) -> None:
    info = inspect_repo(repo)
    (repo / "pkg" / "later.py").write_text("def later():\n    pass\n")
    with pytest.raises(UsageError) as err:
        check_target(info, "pkg.later:later")
    assert err.value.message.startswith(f"module 'pkg.later' is not in commit {short(repo)}; tried:\n")
    assert (
        err.value.hint == f"pkg/later.py exists in the working tree but not at commit {short(repo)}: commit and push it"
    )


def test_function_is_checked_at_the_commit(repo: Path) -> None:
    old = inspect_repo(repo)
    commit(repo, "Add finetune", **{"pkg/train.py": TRAIN + "\ndef finetune(run):\n    pass\n"})
    git(repo, "push", "-q")
    check_target(inspect_repo(repo), "pkg.train:finetune")
    with pytest.raises(
        UsageError, match=rf"pkg/train.py at commit {short(repo, old.commit)} has no top-level function 'finetune'"
    ):
        check_target(old, "pkg.train:finetune")


def test_every_refusal_is_a_roach_error(repo: Path) -> None:
    assert issubclass(UsageError, RoachError)
    with pytest.raises(RoachError):
        check_target(inspect_repo(repo), "nope")


def test_a_pinned_commit_must_be_pushed_and_the_working_tree_does_not_matter(repo: Path):
    first = git(repo, "rev-parse", "HEAD")
    pushed = commit(repo, "pushed", **{"pkg/more.py": "X = 1\n"})
    git(repo, "push", "-q")
    local = commit(repo, "not pushed", **{"pkg/local.py": "Y = 2\n"})
    (repo / "pkg" / "train.py").write_text("dirty\n")
    assert inspect_repo(repo, first).commit == first  # HEAD unpushed and a dirty tree: not the pinned commit's business
    assert inspect_repo(repo, pushed[:10]).commit == pushed
    with pytest.raises(UsageError, match=r"is not on origin/main") as e:
        inspect_repo(repo, local)
    assert "push it" in e.value.hint
    with pytest.raises(UsageError, match="is not in the repository"):
        inspect_repo(repo, "0" * 40)
    with pytest.raises(UsageError, match="uncommitted change"):
        inspect_repo(repo)  # HEAD itself is still refused


def test_a_target_found_good_at_a_commit_is_not_looked_up_again(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    info = inspect_repo(repo)
    assert checked_module(info, "pkg.train:train") == "pkg/train.py"
    with pytest.raises(UsageError, match="no top-level function 'nope'"):
        checked_module(info, "pkg.train:nope")
    # another process, without git on its PATH: it needs none for that target at that commit
    code = (
        "import sys; from pathlib import Path; from roach.launch.repo import RepoInfo; "
        "from roach.launch.target import checked_module; "
        "print(checked_module(RepoInfo(Path(sys.argv[1]), 'work', sys.argv[2], 'main', 'origin/main', 'origin', ''), "
        "'pkg.train:train'))"
    )
    env = {**os.environ, "PATH": str(tmp_path / "no-bin"), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(info.root), info.commit], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "pkg/train.py", out.stderr
    with pytest.raises(UsageError, match="no top-level function 'nope'"):
        checked_module(info, "pkg.train:nope")  # a refusal is never remembered
    commit(repo, "Drop train", **{"pkg/train.py": "def evaluate(run):\n    pass\n"})
    git(repo, "push", "-q")
    with pytest.raises(UsageError, match="no top-level function 'train'"):
        checked_module(inspect_repo(repo), "pkg.train:train")  # another commit is looked at afresh


def test_arguments_are_checked_against_the_def_at_the_commit_not_the_working_tree(repo: Path) -> None:
    info = inspect_repo(repo)
    (repo / "pkg" / "train.py").write_text("def train(run, learning_rate):\n    pass\n")  # not committed
    params = target_params(info, "pkg.train:train")
    assert params is not None
    check_calls(info, "pkg.train:train", params, [{"lr": 0.1}], grid=False)
    with pytest.raises(UsageError) as err:
        check_calls(info, "pkg.train:train", params, [{"learning_rate": 0.1}], grid=False)
    assert err.value.message == (
        f"pkg.train:train at commit {short(repo)}: train takes no argument 'learning_rate'; "
        "it is train(run, lr) (pkg/train.py:1)"
    )
    assert err.value.hint == "did you mean 'lr'? its arguments are: lr"


def test_what_a_target_takes_is_remembered_with_it(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    info = inspect_repo(repo)
    assert checked_target(info, "pkg.train:train") == ("pkg/train.py", target_params(info, "pkg.train:train"))
    # another process, without git on its PATH: what train takes comes from what the first look remembered
    code = (
        "import sys; from pathlib import Path; from roach.launch.repo import RepoInfo; "
        "from roach.launch.target import checked_target; "
        "path, params = checked_target(RepoInfo(Path(sys.argv[1]), 'work', sys.argv[2], 'main', 'origin/main', "
        "'origin', ''), 'pkg.train:train'); print(path, params.shown)"
    )
    env = {**os.environ, "PATH": str(tmp_path / "no-bin"), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(info.root), info.commit], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pkg/train.py train(run, lr)"
