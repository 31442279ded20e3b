"""Bad ``poet train``/``poet plan`` arguments (issue 23): refused before any training, naming the option;
a user's model function that raises is reported by name, not as a traceback."""

import sys

import pytest

from poet.cli import main


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--steps", "0"], "argument --steps: '0' is not a whole number of training steps, 1 or more"),
        (["--steps", "-3"], "argument --steps: '-3' is not a whole number of training steps"),
        (["--batch-size", "0"], "argument --batch-size: '0' is not a whole number of samples, 1 or more"),
        (["--batch-size", "-1"], "argument --batch-size: '-1' is not a whole number of samples"),
        (["--lr", "nan"], "argument --lr: 'nan' is not a finite learning rate >= 0"),
        (["--lr", "inf"], "argument --lr: 'inf' is not a finite learning rate"),
        (["--dropout", "2"], "argument --dropout: '2' is not a dropout probability in [0, 1)"),
        (["--time-limit", "nan"], "argument --time-limit: 'nan' is not a positive number of seconds"),
    ],
)
def test_train_arguments_out_of_range_are_refused(capsys, argv, says):
    assert main(["train", "--model", "mlp", "--quiet", "--no-cache", *argv]) == 2
    out, err = capsys.readouterr()
    assert says in err and "Traceback" not in err and out == ""


def test_plan_refuses_a_bad_batch_size_too(capsys):
    assert main(["plan", "--model", "mlp", "--batch-size", "0", "--quiet"]) == 2
    assert "argument --batch-size" in capsys.readouterr().err


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "bad_user_model.py").write_text(
        "def broken():\n    raise RuntimeError('the dataset is missing')\ndef wrong():\n    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "bad_user_model"
    sys.modules.pop("bad_user_model", None)


def test_a_user_function_that_raises_is_named_with_its_error(capsys, user_module):
    assert main(["train", "--model", f"{user_module}:broken", "--steps", "1", "--quiet", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert f"--model {user_module}:broken: {user_module}.broken() raised RuntimeError: the dataset is missing" in err
    assert "Traceback" not in err


def test_a_user_function_returning_the_wrong_thing_says_what_it_must_return(capsys, user_module):
    assert main(["plan", "--model", f"{user_module}:wrong", "--quiet", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "must return (model, loss_fn, data), got int" in err
