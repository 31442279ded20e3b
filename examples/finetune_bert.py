"""Fine-tune a tiny BERT-style classifier (transformers BertConfig, random init) with an executed schedule.

python examples/finetune_bert.py [--steps 10] [--memory 50%] [--granularity layer]
"""

import argparse
import copy

import torch

import poet
from poet import demo_models as models

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--memory", default="50%")
ap.add_argument("--strategy", default="paging")
ap.add_argument("--granularity", default="aten", choices=["aten", "layer"])
a = ap.parse_args()

torch.manual_seed(0)
model = models.small_bert(dropout=0.1).train()
data = models.TokenData(batch_size=4, seq_len=16, seed=1)
reference = copy.deepcopy(model)
data_state, rng_state = data.g.get_state(), torch.get_rng_state()

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
(ids,), (labels,) = data.batch()
plan = poet.plan(
    model,
    (ids,),
    loss_fn=models.bert_loss,
    targets=(labels,),
    device="m4",
    memory=a.memory,
    strategy=a.strategy,
    granularity=a.granularity,
    optimizer=opt,
    time_limit=30,
)
print(plan)
losses = []
batch = ((ids,), (labels,))
for step in range(a.steps):
    if step:
        batch = data.batch()
    res = plan.train_step(*batch, optimizer=opt)
    losses.append(res.loss.item())
    print(f"step {step + 1:3d}  loss {losses[-1]:.5f}  peak {res.measured_peak_bytes} B (budget {res.budget_bytes} B)")
print(res.table())

data.g.set_state(data_state)
torch.set_rng_state(rng_state)
ropt = torch.optim.Adam(reference.parameters(), lr=1e-3)
plain = []
for _ in range(a.steps):
    (ids,), (labels,) = data.batch()
    ropt.zero_grad()
    loss = models.bert_loss(reference(ids), labels)
    loss.backward()
    ropt.step()
    plain.append(loss.item())
print("loss curve identical to plain PyTorch:", plain == losses)
