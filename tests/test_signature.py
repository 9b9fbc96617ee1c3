"""The keyword arguments a target takes, read from its ``def`` with ast, against how a rank really calls it: each shape
is also compiled here and bound with inspect the way the rank calls it (``fn(run, **args)`` or ``fn(**args)``)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

import pytest

from roach.launch.signature import Params, call_problem, problem, read_params
from roach.runtime.context import Run
from roach.runtime.rank import wants_run


def params_of(src: str, function: str = "train") -> Params | None:
    return read_params(ast.parse(textwrap.dedent(src)), function, "pkg/train.py")


def rank_takes(src: str, args: dict[str, Any], function: str = "train") -> bool:
    """Does the rank's call of the compiled function (its body does nothing) take ``args``?"""
    namespace: dict[str, Any] = {"Run": Run}
    code = compile(textwrap.dedent(src), "pkg/train.py", "exec", dont_inherit=True)  # not this file's __future__
    exec(code, namespace)  # noqa: S102 - the test's own source
    fn = namespace[function]
    try:
        called = fn(object(), **args) if wants_run(fn) else fn(**args)
    except TypeError:
        return False
    if inspect.iscoroutine(called):
        called.close()
    return True


SHAPES = {
    "plain": "def train(run, lr, width=64, steps=60, seed=0):\n    pass\n",
    "keyword_only": "def train(run, lr, *, width, seed=0):\n    pass\n",
    "var_args": "def train(run, *rest, width):\n    pass\n",
    "kwargs": "def train(run, lr, **extra):\n    pass\n",
    "positional_only": "def train(run, lr=0.1, /, width=64):\n    pass\n",
    "positional_only_kwargs": "def train(run, lr=0.1, /, **extra):\n    pass\n",
    "required_positional_only": "def train(run, lr, /, width=64):\n    pass\n",
    "run_positional_only": "def train(run, /, lr):\n    pass\n",
    "no_run": "def train(lr, width=64):\n    pass\n",
    "run_later": "def train(lr, run=None):\n    pass\n",
    "no_params": "def train():\n    pass\n",
    "annotated_run": "def train(ctx: Run, lr):\n    pass\n",
    "annotated_run_string": "def train(ctx: 'Run', lr):\n    pass\n",
    "dotted_run_as_string": "from __future__ import annotations\n\ndef train(ctx: slurm.Run, lr=1):\n    pass\n",
    "async": "async def train(run, lr):\n    pass\n",
    "lru_cache": "import functools\n\n@functools.lru_cache(maxsize=None)\ndef train(run, lr):\n    pass\n",
}
ARGS: list[dict[str, Any]] = [
    {},
    {"lr": 0.1},
    {"learning_rate": 0.1},
    {"lr": 0.1, "width": 32},
    {"lr": 0.1, "widht": 32},
    {"width": 32},
    {"run": 1},
    {"lr": 0.1, "run": 1},
    {"ctx": 1, "lr": 0.1},
    {"rest": [1]},
    {"extra": 1, "lr": 2},
    {"LR": 0.1},
]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_what_the_source_says_is_what_the_rank_can_call(shape: str) -> None:
    src = SHAPES[shape]
    params = params_of(src)
    assert params is not None
    for args in ARGS:
        if shape == "positional_only_kwargs" and "run" in args:
            continue  # Python's **extra would take it; roach refuses a run's argument named as the context (below)
        assert (call_problem(params, args) is None) == rank_takes(src, args), args


def test_an_unknown_argument_names_the_function_its_parameters_and_the_close_one() -> None:
    params = params_of(SHAPES["plain"])
    assert params is not None
    message, hint = call_problem(params, {"learning_rate": 0.1}) or ("", "")
    assert message == (
        "train takes no argument 'learning_rate'; it is train(run, lr, width=64, steps=60, seed=0) (pkg/train.py:1)"
    )
    assert hint == "did you mean 'lr'? its arguments are: lr, width, steps, seed"


def test_several_unknown_arguments_each_get_their_close_one() -> None:
    params = params_of(SHAPES["plain"])
    assert params is not None
    message, hint = call_problem(params, {"lr": 1, "widht": 2, "sede": 3, "zzz": 4}) or ("", "")
    assert message.startswith("train takes no arguments 'widht', 'sede', 'zzz'; ")
    assert hint.startswith("did you mean 'width' (for 'widht'), 'seed' (for 'sede')? ")


def test_a_missing_argument_says_how_to_give_it() -> None:
    params = params_of(SHAPES["keyword_only"])
    assert params is not None
    message, hint = call_problem(params, {"lr": 1}) or ("", "")
    assert message == "train needs argument width, not given; it is train(run, lr, *, width, seed=0) (pkg/train.py:1)"
    assert hint == "give --arg width=VALUE (Python: args={...}), or a default in the def"


def test_the_run_context_is_not_an_argument() -> None:
    params = params_of(SHAPES["kwargs"])
    assert params is not None
    message, hint = call_problem(params, {"lr": 1, "run": 2}) or ("", "")
    assert message.startswith("'run' is the run context roach passes to train, not an argument to give; ")
    assert hint == "drop 'run' from the arguments"
    where_python_would_take_it = params_of(SHAPES["positional_only_kwargs"])
    assert where_python_would_take_it is not None
    assert call_problem(where_python_would_take_it, {"run": 2}) is not None


def test_a_positional_only_argument_says_to_move_it_after_the_slash() -> None:
    params = params_of(SHAPES["positional_only"])
    assert params is not None
    message, hint = call_problem(params, {"lr": 1}) or ("", "")
    assert message.startswith("'lr': positional-only (before '/') in train, and roach passes arguments by keyword; ")
    assert hint == "move lr after the '/' in the def"
    required = params_of(SHAPES["required_positional_only"])
    assert required is not None
    message, _ = call_problem(required, {}) or ("", "")
    assert message.startswith("train's parameter lr is positional-only (before '/') without a default: ")


def test_the_signature_is_shown_as_written() -> None:
    src = "def train(run, a, /, b=[1, 2], *rest, c, d='" + "x" * 40 + "', **kw):\n    pass\n"
    params = params_of(src)
    assert params is not None
    assert params.shown == "train(run, a, /, b=[1, 2], *rest, c, d='" + "x" * 20 + "..., **kw)"


def test_a_decorator_known_to_keep_the_signature_is_seen_through() -> None:
    src = "import torch\n\n@torch.no_grad()\ndef train(run, lr):\n    pass\n"
    params = params_of(src)
    assert params is not None
    assert params.keywords == ["lr"]


@pytest.mark.parametrize(
    "src",
    [
        "import hydra\n\n@hydra.main(config_path='conf')\ndef train(cfg):\n    pass\n",  # a decorator may change it
        "def train(run, lr):\n    pass\n\ntrain = wrap(train)\n",  # rebound
        "if FAST:\n    def train(run, lr):\n        pass\nelse:\n    def train(run, width):\n        pass\n",
        "def train(run, lr):\n    pass\n\nfrom other import *\n",  # a star import after it may rebind it
        "from pkg.base import train\n",  # imported: its def is elsewhere
        "train = make_trainer()\n",
        "def train(run, lr):\n    pass\n\nfor train in []:\n    pass\n",
        "def train(*, run, lr):\n    pass\n",  # the rank passes the context positionally: the call fails either way
    ],
)
def test_a_name_the_source_does_not_pin_down_is_not_checked(src: str) -> None:
    assert params_of(src) is None


def test_a_star_import_above_the_def_is_rebound_by_it() -> None:
    params = params_of("from pkg.common import *\n\ndef train(run, lr):\n    pass\n")
    assert params is not None
    assert params.keywords == ["lr"]


def test_a_method_of_the_same_name_is_not_the_target() -> None:
    src = "class Trainer:\n    def train(self, lr, momentum):\n        pass\n\ndef train(run, width):\n    pass\n"
    params = params_of(src)
    assert params is not None
    assert params.keywords == ["width"]
    assert params.where == "pkg/train.py:5"


def test_a_method_alone_is_not_read_as_a_target() -> None:
    assert params_of("class Trainer:\n    def train(self, lr):\n        pass\n") is None


def test_a_def_under_an_if_at_module_level_counts() -> None:
    params = params_of("import sys\n\nif sys.platform:\n    def train(run, lr):\n        pass\n")
    assert params is not None
    assert params.keywords == ["lr"]


def test_a_grid_names_its_entries_that_fail_the_same_way_and_counts_the_others() -> None:
    params = params_of(SHAPES["plain"])
    assert params is not None
    grid = [{"lr": 1}, {"lr": 1, "widht": 64}, {"lr": 2}, {"lr": 3, "widht": 32}, {"width": 8}]
    which, message, hint = problem(params, grid, grid=True) or ("", "", "")
    assert which == "grid entries 1, 3 of 5 (counted from 0; 1 other entry is refused too): "
    assert message.startswith("train takes no argument 'widht'; ")
    assert hint.startswith("did you mean 'width'? ")
    assert problem(params, [{"lr": 1}, {"lr": 2, "seed": 3}], grid=True) is None


def test_one_runs_refusal_names_no_entry() -> None:
    params = params_of(SHAPES["plain"])
    assert params is not None
    which, _, _ = problem(params, [{"widht": 1}], grid=False) or ("x", "", "")
    assert which == ""


def test_params_keep_through_json() -> None:
    params = params_of("def train(run, a=1, /, b=2, *c, d, **e):\n    pass\n")
    assert params is not None
    assert Params.from_json(params.to_json()) == params
