"""The weight-streaming linear kernels (runtime/pk_wstream.c) against torch, and the bytes they move
against what poet.graph.weight_traffic prices, on the zoo's `linear` MLP run as a training step.

Each kernel sums over the reduction axis in order in float32 (a row of W may span staging chunks; the
order is kept), so its error against torch's float32 result is within the recursive-summation bound
``2 (k + 2) u sum |terms|`` (u = 2^-24), checked elementwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from toolchain import build_cache_dir, require  # noqa: E402,F401  (build_cache_dir: a fixture)

from poet.cbackend import hostlib, wstream  # noqa: E402
from poet.graph.weight_traffic import derive_traffic, traffic_total  # noqa: E402
from poet.graph.zoo import build_model  # noqa: E402
from poet.hardware.weights_cost import weight_store  # noqa: E402

U = 2.0**-24


@pytest.fixture(autouse=True)
def cc(request, monkeypatch, tmp_path):
    try:
        hostlib.compiler()
    except hostlib.KernelError as e:
        require(str(e))
    monkeypatch.setenv("POET_CACHE_DIR", str(request.getfixturevalue("build_cache_dir")))
    monkeypatch.chdir(tmp_path)  # the platform's files live in the working folder


def within(got, ref, k: int, scale) -> None:
    bound = 2 * (k + 2) * U * scale + 1e-30
    err = (got.double() - ref.double()).abs()
    assert bool((err <= bound).all()), f"max error {err.max():.3g} above the bound {bound.max():.3g}"


def store_block(name: str, w, b, offset: int = 0) -> None:
    blob = torch.cat([w.reshape(-1), b.reshape(-1)]).numpy().tobytes()
    import os

    with open(name, "r+b" if os.path.exists(name) else "wb") as f:
        f.seek(offset)
        f.write(blob)


def read_block(name: str, out: int, inp: int, offset: int = 0):
    with open(name, "rb") as f:
        f.seek(offset)
        raw = f.read(4 * out * (inp + 1))
    flat = torch.frombuffer(bytearray(raw), dtype=torch.float32)
    return flat[: out * inp].reshape(out, inp), flat[out * inp :]


@pytest.mark.parametrize("n,inp,out,staging", [(1, 7, 5, 8), (3, 16, 9, 44), (2, 33, 4, 4096)])
def test_forward_input_grad_weight_grad_and_update_match_torch(n, inp, out, staging):
    g = torch.Generator().manual_seed(n * 100 + inp)
    w, b = torch.randn(out, inp, generator=g), torch.randn(out, generator=g)
    x, dy, dy2 = (torch.randn(n, k, generator=g) for k in (inp, out, out))
    store_block("weights.bin", w, b, 16)  # a layer at offset 16: the kernels honour the offset
    buf = torch.empty(staging // 4)
    wf, gf = wstream.open_file("weights.bin"), wstream.open_file("grads.bin")
    try:
        y, dx = torch.empty(n, out), torch.empty(n, inp)
        wstream.linear_forward(wf, 16, x, y, buf)
        within(y, x @ w.T + b, inp, x.abs() @ w.abs().T + b.abs())
        wstream.linear_input_grad(wf, 16, dy, dx, buf)
        within(dx, dy @ w, out, dy.abs() @ w.abs())
        wstream.linear_weight_grad(gf, 16, x, dy, True, buf)  # the first contribution writes
        wstream.linear_weight_grad(gf, 16, x, dy2, False, buf)  # a later one reads, adds, writes
    finally:
        wstream.close_file(wf)
        wstream.close_file(gf)
    gw, gb = read_block("grads.bin", out, inp, 16)
    within(gw, dy.T @ x + dy2.T @ x, 2 * n, (dy.abs().T @ x.abs()) + (dy2.abs().T @ x.abs()))
    within(gb, dy.sum(0) + dy2.sum(0), 2 * n, dy.abs().sum(0) + dy2.abs().sum(0))
    wf, gf = wstream.open_file("weights.bin"), wstream.open_file("grads.bin")
    try:
        wstream.sgd(wf, gf, 16, 4 * out * (inp + 1), 0.1, buf)
    finally:
        wstream.close_file(wf)
        wstream.close_file(gf)
    nw, nb = read_block("weights.bin", out, inp, 16)
    assert torch.equal(nw, w - 0.1 * gw) and torch.equal(nb, b - 0.1 * gb)


def test_a_bad_staging_buffer_is_refused():
    wf = wstream.open_file("weights.bin")
    try:
        with pytest.raises(hostlib.KernelError, match="bad arguments"):
            wstream.linear_forward(wf, 0, torch.ones(1, 2), torch.empty(1, 2), torch.empty(1))
    finally:
        wstream.close_file(wf)


def test_the_priced_traffic_is_what_a_streamed_training_step_moves():
    """The `linear` MLP's step in graph order, every linear layer through the streaming kernels (torch for
    ReLU and the loss): the bytes and transfers counted equal the graph's priced traffic, and the updated
    weights equal torch's SGD step."""
    graph = build_model("linear", batch_size=2)
    staging = 1000
    store = weight_store(graph, "m0", "stream", staging)
    priced = traffic_total(derive_traffic([(n.name, n.kind, n.tile, n.output_bytes) for n in graph.nodes], store))
    torch.manual_seed(0)
    dims = [784, 128, 128, 64, 32, 10]
    layers = [torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:])]
    x, target = torch.randn(2, 784), torch.tensor([3, 7])
    offsets, off = [], 0
    for lay in layers:
        offsets.append(off)
        store_block("weights.bin", lay.weight.detach(), lay.bias.detach(), off)
        off += 4 * lay.weight.numel() + 4 * lay.bias.numel()
    assert off == graph.param_bytes == store.param_bytes
    buf = torch.empty(staging // 4)
    wf, gf = wstream.open_file("weights.bin"), wstream.open_file("grads.bin")
    wstream.reset()
    try:
        acts, h = [x], x
        for k, _ in enumerate(layers):  # forward: fc1, relu1, ..., fc5
            y = torch.empty(2, dims[k + 1])
            wstream.linear_forward(wf, offsets[k], h.contiguous(), y, buf)
            h = torch.relu(y) if k < len(layers) - 1 else y
            acts.append(h)
        logits = acts[-1].clone().requires_grad_(True)
        torch.nn.functional.cross_entropy(logits, target).backward()
        dy = logits.grad
        for k in reversed(range(len(layers))):  # backward: bwd.fc5, bwd.relu4, ..., bwd.fc1
            if k > 0:  # an input gradient (bwd.fc1 reads only the data: none)
                dx = torch.empty(2, dims[k])
                wstream.linear_input_grad(wf, offsets[k], dy.contiguous(), dx, buf)
            wstream.linear_weight_grad(gf, offsets[k], acts[k].contiguous(), dy.contiguous(), True, buf)
            if k > 0:
                dy = dx * (acts[k] > 0)
        for k, lay in enumerate(layers):  # the SGD update streams through weights and gradients
            wstream.sgd(wf, gf, offsets[k], 4 * (lay.weight.numel() + lay.bias.numel()), 0.05, buf)
        moved = wstream.counters()
    finally:
        wstream.close_file(wf)
        wstream.close_file(gf)
    assert moved == (priced.read_bytes, priced.write_bytes, priced.reads, priced.writes)
    # torch's step on the same weights
    model = torch.nn.Sequential(*[m for lay in layers for m in (lay, torch.nn.ReLU())][:-1])
    torch.nn.functional.cross_entropy(model(x), target).backward()
    with torch.no_grad():
        for k, lay in enumerate(layers):
            nw, nb = read_block("weights.bin", lay.out_features, lay.in_features, offsets[k])
            assert torch.allclose(nw, lay.weight - 0.05 * lay.weight.grad, atol=1e-6, rtol=1e-5)
            assert torch.allclose(nb, lay.bias - 0.05 * lay.bias.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "n,cin,h,cout,k,stride,pad,bias,staging,tiles",
    [(1, 3, 6, 4, 3, 1, 1, True, 40, 3), (2, 2, 7, 3, 3, 2, 1, False, 12, 2), (1, 4, 5, 2, 1, 1, 0, True, 4096, 5)],
)
def test_conv_row_tiles_stream_their_weights_and_match_torch(n, cin, h, cout, k, stride, pad, bias, staging, tiles):
    g = torch.Generator().manual_seed(cin * 10 + h)
    x = torch.randn(n, cin, h, h, generator=g)
    w = torch.randn(cout, cin, k, k, generator=g)
    b = torch.randn(cout, generator=g) if bias else torch.zeros(0)
    ref = torch.nn.functional.conv2d(x, w, b if bias else None, stride=stride, padding=pad)
    hout, wout = ref.shape[2], ref.shape[3]
    dy = torch.randn(ref.shape, generator=g)
    conv = (cout, hout, wout, k, stride, pad, bias)
    store_block("weights.bin", w, b)
    buf = torch.empty(staging // 4)
    cuts = [round(t * hout / tiles) for t in range(tiles + 1)]
    in_cuts = [round(t * h / tiles) for t in range(tiles + 1)]
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    torch.nn.functional.conv2d(xr, wr, b if bias else None, stride=stride, padding=pad).backward(dy)
    wf, gf = wstream.open_file("weights.bin"), wstream.open_file("grads.bin")
    wstream.reset()
    try:
        for r0, r1 in zip(cuts, cuts[1:]):
            if r1 <= r0:
                continue
            y = torch.empty(n, cout, r1 - r0, wout)
            wstream.conv2d_forward(wf, 0, x, y, conv, (r0, r1), buf)
            terms = torch.nn.functional.conv2d(x.abs(), w.abs(), b.abs() if bias else None, stride=stride, padding=pad)
            within(y, ref[:, :, r0:r1], cin * k * k + 1, terms[:, :, r0:r1])
            wstream.conv2d_weight_grad(gf, 0, x, dy[:, :, r0:r1].contiguous(), conv, (r0, r1), r0 == 0, buf)
        for r0, r1 in zip(in_cuts, in_cuts[1:]):
            dx = torch.empty(n, cin, r1 - r0, h)
            wstream.conv2d_input_grad(wf, 0, dy, dx, x.shape, conv, (r0, r1), buf)
            torch.testing.assert_close(dx, xr.grad[:, :, r0:r1], atol=1e-4, rtol=1e-4)
        moved = wstream.counters()
    finally:
        wstream.close_file(wf)
        wstream.close_file(gf)
    gw, gb = read_block("grads.bin", cout, cin * k * k)
    torch.testing.assert_close(gw.reshape(w.shape), wr.grad, atol=1e-4, rtol=1e-4)
    if bias:
        torch.testing.assert_close(gb[:cout], dy.sum((0, 2, 3)), atol=1e-4, rtol=1e-4)
    block = 4 * (w.numel() + b.numel())
    chunks = -(-block // staging)
    ntiles = sum(r1 > r0 for r0, r1 in zip(cuts, cuts[1:]))
    # every tile reads the block (forward, input gradient); the gradient is written once, then read-modify-written
    assert moved[0] == block * (ntiles + tiles) + block * (ntiles - 1)
    assert moved[1] == block * ntiles
    assert moved[2] == chunks * (ntiles + tiles + ntiles - 1) and moved[3] == chunks * ntiles
