"""The command-line options that pick and trace a model (``--model``, ``--batch-size``, ``--dropout``,
``--seed``), shared by ``poet plan``, ``poet train`` and ``poet compile`` (no torch imported here)."""

from __future__ import annotations

MODEL_HELP = (
    "cnn, bert, mlp (built-in, generated data) or module:function returning "
    "(model, loss_fn, data) where data.batch() -> (inputs, targets); the module is "
    "looked up in the current directory, then on PYTHONPATH"
)


def add_model_options(group, *, model_default: str | None = "cnn", model_help: str = MODEL_HELP) -> None:
    """Add the options to ``group`` (a parser or an argument group); ``model_default`` None makes
    ``--model`` required."""
    from ..units import BATCH, number_option

    if model_default is None:
        group.add_argument("--model", required=True, help=model_help)
    else:
        group.add_argument("--model", default=model_default, help=model_help)
    group.add_argument("--batch-size", type=BATCH, default=8)
    group.add_argument(
        "--dropout",
        type=number_option("float", "a dropout probability in [0, 1)", "0.1", minimum=0.0, below=1.0),
        default=0.1,
    )
    group.add_argument("--seed", type=int, default=0)
