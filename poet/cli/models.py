"""``poet models``: the built-in networks (the paper's zoo)."""

from __future__ import annotations


def cmd_models(a) -> int:
    from ..graph.zoo import MODELS, build_model

    print(f"{'model':<16}{'nodes':>7}{'params':>14}  description")
    for name, desc in MODELS.items():
        g = build_model(name)
        print(f"{name:<16}{len(g.nodes):>7}{g.param_bytes // 4:>14,}  {desc}")
    return 0


def register(subparsers) -> None:
    subparsers.add_parser("models", help="list the built-in networks").set_defaults(func=cmd_models)
