"""Fine-tune a small CNN under a RAM budget with an executed POET schedule (generated data, no downloads).

    python examples/finetune_cnn.py [--steps 20] [--memory 40%] [--strategy poet]

Each training step runs the schedule instruction by instruction on real tensors
(recomputing, paging to files, freeing); at the end the loss curve is compared
with plain PyTorch training from the same seed.
"""

import argparse
import copy

import torch

import poet
from poet import demo_models as models

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--memory", default="40%")
ap.add_argument("--strategy", default="paging")
ap.add_argument("--device", default="m4")
a = ap.parse_args()

torch.manual_seed(0)
model = models.SmallResNet(channels=8, blocks=2, dropout=0.1).train()
data = models.ImageData(batch_size=8, size=16, seed=1)
loss_fn = torch.nn.CrossEntropyLoss()
reference = copy.deepcopy(model)
data_state, rng_state = data.g.get_state(), torch.get_rng_state()

opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
(x,), (y,) = data.batch()
plan = poet.plan(
    model,
    (x,),
    loss_fn=loss_fn,
    targets=(y,),
    device=a.device,
    memory=a.memory,
    strategy=a.strategy,
    optimizer=opt,
    time_limit=30,
)
print(plan)

losses = []
batch = ((x,), (y,))
for step in range(a.steps):
    if step:
        batch = data.batch()
    res = plan.train_step(*batch, optimizer=opt)
    losses.append(res.loss.item())
    print(
        f"step {step + 1:3d}  loss {losses[-1]:.5f}  peak {res.measured_peak_bytes} B "
        f"(budget {res.budget_bytes} B)  paged {res.bytes_written} B"
    )
print(res.table())

# the same training in plain PyTorch
data.g.set_state(data_state)
torch.set_rng_state(rng_state)
ropt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
plain = []
for _ in range(a.steps):
    (x,), (y,) = data.batch()
    ropt.zero_grad()
    loss = loss_fn(reference(x), y)
    loss.backward()
    ropt.step()
    plain.append(loss.item())
print("loss curve identical to plain PyTorch:", plain == losses)
