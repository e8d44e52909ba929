"""FedDF (Lin et al., NeurIPS 2020): FedAvg, then server-side ensemble distillation.

After the clients' models are averaged, the average (the student) is trained on unlabeled data to
match the received client models' averaged logits (AVGLOGITS, FedDF eq. in Section 3):

    x_{t,j} = x_{t,j-1} - eta * d KL( softmax(mean_k f(x_k, d) / T) || softmax(f(x_{t,j-1}, d) / T) )

As in the paper (Section 4.1) and the authors' code (NoiseKTSolver): Adam lr 1e-3 with cosine
annealing over the step budget (10,000), batch 128, gradient norm clipped to 5, KL with batch mean,
T = 1 and no T^2 factor, uniform average of the teachers' logits, student in train mode and teachers
in eval mode; validation accuracy on the held-out split every 100 steps, stop once 1,000 steps passed
without a gain over the distillation's best validation so far (its first validation included; the
code's BestPerf and check_early_stopping), and keep the best model.

Choices where the paper is silent or the code is optional:
- The model kept is the best distilled one even when the average it started from validates
  better, as the code's README runs FedDF (``return_best_model_on_val`` left False: the averaged
  model is no candidate). A later model must be strictly better to replace the best; the step
  budget's last step is validated too, so a distillation of any length keeps a validated model.
- Unlabeled images (noise apart) go through the run's own preprocessing with training augmentation
  (crop+flip on colour images, none on MNIST), the model's normalisation, and a generator derived
  from (seed, "feddf", round); teachers and student see the same batch.
- ``unlabeled`` picks the distillation data: a dataset name (its training images, labels ignored;
  CIFAR-100 for CIFAR-10 as in the paper; CIFAR-10 stands in for ImageNet-32 on CIFAR-100),
  ``"train-slice"`` (a fixed random ``unlabeled_fraction`` of the run's training split, labels
  ignored; the clients also train on these samples, so this is an optimistic stand-in used offline
  and for Tiny-ImageNet, MNIST and text, where the paper's NLP runs distil on a held-apart half of
  the training set) or ``"noise"`` (FedDF Fig. 5's "random uniformly sampled noises": each input
  value uniform in [-1, 1], the range the code gives its random data, and like the code's not
  augmented; random token ids for text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedkd.losses import kd_kl
from fedkd.runtime.evaluate import evaluate
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies._params import CheckedParams, above, at_least, ranged, within
from fedkd.strategies.base import ClientUpdate, Strategy, Traits

UNLABELED_KINDS = ("train-slice", "noise")


@dataclass
class FedDFParams(CheckedParams):
    # distillation steps per round at most (0: plain FedAvg)
    max_steps: int = ranged(10_000, at_least(0))
    # stop after this many steps without beating the distillation's best validation so far
    patience: int = ranged(1_000, at_least(1))
    eval_every: int = ranged(100, at_least(1))  # validate the student every this many steps
    batch_size: int = ranged(128, at_least(1))
    lr: float = ranged(1e-3, above(0))  # Adam, cosine-annealed to 0 over max_steps
    grad_clip: float | None = ranged(5.0, above(0), "or null for no clipping")
    temperature: float = ranged(1.0, above(0))
    unlabeled: str = "train-slice"  # a dataset name, "train-slice" or "noise"
    # share of the training split used by "train-slice"
    unlabeled_fraction: float = ranged(0.5, within(0, 1, low_open=True))

    def check(self) -> None:
        from fedkd.data import dataset_names

        if self.unlabeled not in UNLABELED_KINDS and self.unlabeled not in dataset_names():
            raise ValueError(
                f"params.unlabeled={self.unlabeled!r} is neither a dataset "
                f"({', '.join(dataset_names())}) nor one of {', '.join(UNLABELED_KINDS)}"
            )


def avg_logits_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """KL(softmax(mean_k t_k / T) || softmax(s / T)), batch mean; ``teacher_logits`` is
    (teachers, B, K). The authors' code has no T^2 factor, so the shared kd_kl's is divided out."""
    teacher = teacher_logits.mean(dim=0)
    return kd_kl(student_logits, teacher, temperature) / temperature**2


def noise_images(
    n: int, shape: tuple[int, ...], gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Noise images as the model takes them, every value uniform in [-1, 1]: FedDF Fig. 5's
    "random uniformly sampled noises", in the range its code gives its random data
    (``NoiseKTSolver._create_data_randomly``: [0, 1] mapped to [-1, 1], no augmentation, no
    dataset normalisation)."""
    return torch.rand((n, *shape), generator=gen, device=device) * 2 - 1


class FedDF(Strategy):
    name = "feddf"
    paper = "Lin et al., NeurIPS 2020"
    summary = (
        "FedAvg, then the average is distilled toward the mean logits of the received client models "
        "on unlabeled data (Adam 1e-3 cosine, batch 128, <= 1e4 steps, early stop after 1e3)."
    )
    Params = FedDFParams
    # fedgkd Table 1: no extra information shared, needs proxy data, same network
    traits = Traits(extra_information="none", proxy_data=True, modifies_model=False)

    @classmethod
    def dataset_defaults(cls, dataset, model):
        # the paper distils CIFAR-10 on CIFAR-100, and CIFAR-100 on ImageNet-32, for which there is
        # no loader here: CIFAR-10 stands in (real 32x32 images from another label set)
        return {
            "unlabeled": {"cifar10": "cifar100", "cifar100": "cifar10"}.get(dataset, "train-slice")
        }

    def __init__(self, params: FedDFParams, ctx):
        super().__init__(params, ctx)
        self._pool: torch.Tensor | None = None  # unlabeled inputs (uint8 images or token ids)
        if ctx is not None:
            self._unlabeled_pool()  # a missing or unfit dataset fails the run before training

    # ------------------------------------------------------------------ unlabeled data
    def _unlabeled_pool(self) -> torch.Tensor | None:
        """The distillation inputs, built once per run (deterministic, so not checkpointed);
        None for noise, which is drawn fresh for every batch."""
        if self._pool is not None or self.params.unlabeled == "noise":
            return self._pool
        ds, spec = self.ctx.dataset, self.ctx.spec
        if self.params.unlabeled == "train-slice":
            n = len(ds.train)
            gen = torch.Generator().manual_seed(derive_seed(spec.seed, "feddf", "slice"))
            k = max(1, int(round(self.params.unlabeled_fraction * n)))
            idx = torch.randperm(n, generator=gen)[:k].sort().values
            self._pool = ds.train.x[idx.to(ds.train.x.device)]
            return self._pool
        from fedkd.data import load_dataset

        # text must be tokenised like the run's data; image loaders take no options
        options = dict(spec.dataset_options) if ds.kind == "text" else {}
        other = load_dataset(self.params.unlabeled, spec.data_root, seed=spec.seed, **options)
        x = other.train.x
        if (
            other.kind != ds.kind
            or tuple(x.shape[1:]) != tuple(ds.input_shape)
            or x.dtype != ds.train.x.dtype
            or (ds.kind == "text" and other.vocab_size != ds.vocab_size)
        ):
            raise ValueError(
                f"feddf: unlabeled dataset {self.params.unlabeled!r} ({other.kind}, inputs "
                f"{tuple(x.shape[1:])} {x.dtype}) does not fit the model's input ({ds.kind}, "
                f"{tuple(ds.input_shape)} {ds.train.x.dtype}); choose a compatible dataset, "
                f"'train-slice' or 'noise'"
            )
        self._pool = x.to(self.ctx.device)
        return self._pool

    def _batches(self, round: int):
        """Endless preprocessed unlabeled batches for one round: reshuffled passes over the pool
        (or fresh noise), all randomness from (seed, "feddf", round)."""
        p, ds, device = self.params, self.ctx.dataset, self.ctx.device
        preprocess = self.ctx.preprocessor()
        seed = derive_seed(self.ctx.spec.seed, "feddf", round)
        cpu_gen = torch.Generator().manual_seed(seed)
        dev_gen = torch.Generator(device=device).manual_seed(seed)
        pool = self._unlabeled_pool()
        while True:
            if pool is None:
                if ds.kind == "text":
                    shape = (p.batch_size, *ds.input_shape)
                    hi = ds.vocab_size or 2
                    x = torch.randint(1, hi, shape, generator=dev_gen, device=device)
                    yield preprocess(x, train=True, gen=dev_gen)
                    continue
                x = noise_images(p.batch_size, ds.input_shape, dev_gen, device)
                channels_last = getattr(preprocess, "channels_last", False)
                yield x.contiguous(memory_format=torch.channels_last) if channels_last else x
                continue
            order = torch.randperm(len(pool), generator=cpu_gen).to(pool.device)
            for start in range(0, len(pool), p.batch_size):
                x = pool[order[start : start + p.batch_size]]
                yield preprocess(x, train=True, gen=dev_gen)

    # ------------------------------------------------------------------ server step
    def _val_acc(self, model) -> float:
        split = self.ctx.dataset.val
        return evaluate(model, split, self.ctx.preprocessor(), self.ctx.num_classes)["acc"]

    def _teacher(self, state: dict[str, torch.Tensor]):
        model = self.ctx.build_model()
        model.load_state_dict(state)
        model.eval()
        for q in model.parameters():
            q.requires_grad_(False)
        return model

    def server_update(self, round: int, global_model, updates: list[ClientUpdate]) -> dict:
        p = self.params
        init_acc = self._val_acc(global_model)
        if p.max_steps == 0 or not updates:
            return {
                "distill_steps": 0,
                "distill_best_step": 0,
                "distill_val_acc": init_acc,
                "distill_val_acc_init": init_acc,
            }
        teachers = [self._teacher(u.state) for u in updates]
        device = self.ctx.device
        fork = []
        if device.type == "cuda":
            fork = [device.index if device.index is not None else torch.cuda.current_device()]
        # dropout in the student draws from the global generator: seed it per round, and leave
        # the caller's generator state as it was
        with torch.random.fork_rng(devices=fork):
            torch.manual_seed(derive_seed(self.ctx.spec.seed, "feddf", round, "global"))
            steps, best_step, best_acc = self._distill(round, global_model, teachers)
        return {
            "distill_steps": steps,
            "distill_best_step": best_step,
            "distill_val_acc": best_acc,
            "distill_val_acc_init": init_acc,
        }

    def _distill(self, round, student, teachers) -> tuple[int, int, float]:
        p = self.params
        params = [q for q in student.parameters() if q.requires_grad]
        opt = torch.optim.Adam(params, lr=p.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=p.max_steps)
        # the distillation's own best, from its first validation on (the code's BestPerf): the
        # model kept, even below the average, and patience runs from it ("stop ... after the
        # validation performance plateaus")
        best_acc, best_step, best_state = -math.inf, 0, None
        was_training = student.training
        student.train()
        batches = self._batches(round)
        step = 0
        while step < p.max_steps:
            x = next(batches)
            with torch.no_grad():
                teacher_logits = torch.stack([t(x) for t in teachers])
            loss = avg_logits_kl(student(x), teacher_logits, p.temperature)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if p.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, p.grad_clip)
            opt.step()
            sched.step()
            step += 1
            if step % p.eval_every == 0 or step == p.max_steps:
                acc = self._val_acc(student)
                if acc > best_acc:
                    best_acc, best_step = acc, step
                    best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
                if step - best_step >= p.patience:
                    break
        student.load_state_dict(best_state)
        student.train(was_training)
        return step, best_step, best_acc
