"""The FedGKD paper's claims (Yao et al., fedgkd.tex / fedgkd.txt). Quotes are verbatim, with the
paper's small-caps "FEDGKD" written FedGKD.

Each claim is checked on the paper's own cells (tests/test_claims.py, the paper self-check): a
claim the paper's means do not bear out is not the paper's claim. Hence "outperforms" over Tables
3 and 4 is a claim on the average over settings (MOON is ahead of FedGKD in three of the paper's
own cells), while "consistently" and "constantly" are claims on every setting."""

from __future__ import annotations

from fedkd.report.claims.claim import Claim, Trend

# FedGKD's main comparison: Tables 3 (CV) and 4 (text); tiny configurations name them table3/4
TABLE3 = ("fedgkd_table3", "table3")
MAIN = (*TABLE3, "fedgkd_table4", "table4")
TABLE5 = ("fedgkd_table5", "table5")
# the methods FedGKD's tables compare it with ("other methods")
BASELINES = ("fedavg", "fedprox", "moon", "feddistill+", "fedgen")
# "our proposed methods"
PROPOSED = ("fedgkd", "fedgkd-vote", "fedgkd+")
TABLE6 = ("fedgkd_table6", "table6")
OUTPERFORMS = (
    "We compare the top-1 test accuracy of the different methods as reported in Tab. 3 and "
    "Tab. 4, the proposed method FedGKD outperforms previous state-of-the-art methods"
)
WHERE_MAIN = "Tables 3 and 4; Sec. 5.2, Results Overview"
CONSTANTLY = "FedGKD constantly outperforms FedAvg and FedProx in the training procedure."
REGULARIZER = (
    "However, when using the MSE as the regularizer, the accuracy is 1.6% worse on CIFAR-10, "
    "comparable to SST-5, and 1.6% higher on CIFAR-100 compare to the accuracy when using "
    "KL-divergence as the regularizer respectively."
)
# the gap the paper calls a gain in its buffer-length ablation ("over 0.5%"): what "no more
# benefit" tolerates
BENEFIT = 0.5
# "comparable": below the 1.6 points the same sentence calls worse and higher
COMPARABLE = 1.0
FEDGKD_DISTILS_FROM = 2  # round 1 trains on FedAvg's loss: the buffer holds no past model yet
# "by 5.6%" reports the gap the authors measured, and so does "over 2.7%" where 2.7 is the
# paper's own gap (2.71): a faithful reproduction would clear such a bound one time in forty, so
# both are tested as reproductions of the gap
STATED_GAP = (
    "a stated gap is the paper's measurement, not a lower bound: reproduced when the gap is shown "
    "above half of it, contradicted when shown below that; the row says 'larger than stated' or "
    "'smaller than stated' where its interval lies wholly above or below the whole gap"
)
OVER_OWN_GAP = (
    "'over' a gap the paper itself measured ({measured}) reports that measurement: tested as its "
    "reproduction (a stated gap), not as a bound a faithful reproduction would rarely clear"
)


def _beats(baseline: str) -> Claim:
    return Claim(
        id=f"fedgkd-beats-{baseline}",
        paper="fedgkd",
        source=WHERE_MAIN,
        quote=OUTPERFORMS,
        treatment="fedgkd",
        baseline=baseline,
        tables=MAIN,
        aggregate="mean",
    )


OTHER_METHODS = (
    "As shown in Tab. 3, FedGKD, FedGKD-VOTE and FedGKD+ outperform other methods and show their "
    "generality in different α setting."
)


def _beats_in_table3(treatment: str, baseline: str) -> Claim:
    return Claim(
        id=f"{treatment}-beats-{baseline}",
        paper="fedgkd",
        source="Table 3; Sec. 5.2, Impact of Data Heterogeneity",
        quote=OTHER_METHODS,
        treatment=treatment,
        baseline=baseline,
        tables=TABLE3,
        aggregate="mean",
    )


CLAIMS = (
    *(_beats(b) for b in BASELINES),
    Claim(
        id="fedgkd-beats-fedavg-alpha0.1-by-stated-gaps",
        paper="fedgkd",
        source="Tables 3 and 4, α=0.1; Sec. 5.2, Results Overview",
        quote="Under the α = 0.1 (the hyper-parameter for Dirichlet distribution) setting, FedGKD "
        "can outperform FedAvg by 5.6% on Tiny-Imagenet, 1.9% on CIFAR100, 3.0% on CIFAR-10, 0.4% "
        "on AG News, and 2.8% on SST-5.",
        treatment="fedgkd",
        baseline="fedavg",
        tables=MAIN,
        where={"alpha": (0.1,)},
        test="stated-gap",
        margin={"tinyimagenet": 5.6, "cifar100": 1.9, "cifar10": 3.0, "agnews": 0.4, "sst5": 2.8},
        # the paper's own gaps are 5.62, 1.92, 3.05, 0.41 and 2.85
        note=STATED_GAP,
    ),
    # "FedGKD, FedGKD-VOTE and FedGKD+ outperform other methods": each of the three against each
    # other method of Table 3, on average over its settings (as "outperforms" over a table is
    # read for FedGKD: fedgkd-beats-*, over Tables 3 and 4)
    *(
        _beats_in_table3(t, b)
        for t in ("fedgkd-vote", "fedgkd+")
        for b in BASELINES
        if (t, b) != ("fedgkd+", "moon")
    ),  # fmt: skip
    Claim(
        id="fedgkd-gap-grows-with-heterogeneity",
        paper="fedgkd",
        source="Table 3; Sec. 5.2, Impact of Data Heterogeneity",
        quote="FedGKD shows the superiority when the data heterogeneity increases.",
        treatment="fedgkd",
        baseline="fedavg",
        tables=TABLE3,
        trend=Trend("alpha", toward="low"),
    ),
    Claim(
        id="fedgkd+-beats-moon",
        paper="fedgkd",
        source="Tables 3 and 5; Sec. 5.2, Impact of Participation Ratio",
        quote="we find FedGKD+ consistently outperforms MOON.",
        treatment="fedgkd+",
        baseline="moon",
        # the sentence closes the paragraph on Table 5; Table 3 compares the same two methods
        # per alpha. Table 4 is not cited: its SST-5 cell (MOON 41.48, FedGKD+ 41.21) is no part
        # of this sentence
        tables=(*TABLE3, *TABLE5),
    ),
    Claim(
        id="fedgkd+-beats-moon-alpha0.1-by-stated-gaps",
        paper="fedgkd",
        source="Table 3, α=0.1; Sec. 5.2, Comments on Projection Layer",
        quote="But the FedGKD+ still outperforms MOON by 1.9%, 1.5%, and 2.1% on CIFAR-10,CIFAR-100, "
        "and Tiny-ImageNet respectively when α=0.1.",
        treatment="fedgkd+",
        baseline="moon",
        tables=TABLE3,
        where={"alpha": (0.1,)},
        test="stated-gap",
        margin={"cifar10": 1.9, "cifar100": 1.5, "tinyimagenet": 2.1},
        # the paper's own gaps are 1.94, 1.52 and 2.16
        note=STATED_GAP,
    ),
    Claim(
        id="fedgkd-beats-fedprox-tinyimagenet-by-2.7",
        paper="fedgkd",
        source="Table 3, Tiny-ImageNet α=0.1; Sec. 5.2, Effect of Network Architecture",
        quote="The performance of FedProx is 2.9% higher than FedAvg and FedGKD is over 2.7% "
        "higher than FedProx when α=0.1.",
        treatment="fedgkd",
        baseline="fedprox",
        tables=TABLE3,
        where={"dataset": ("tinyimagenet",), "alpha": (0.1,)},
        test="stated-gap",
        margin=2.7,
        note=OVER_OWN_GAP.format(measured="2.71"),
    ),
    Claim(
        id="fedprox-beats-fedavg-tinyimagenet-by-2.9",
        paper="fedgkd",
        source="Table 3, Tiny-ImageNet α=0.1; Sec. 5.2, Effect of Network Architecture",
        quote="The performance of FedProx is 2.9% higher than FedAvg",
        treatment="fedprox",
        baseline="fedavg",
        tables=TABLE3,
        where={"dataset": ("tinyimagenet",), "alpha": (0.1,)},
        test="stated-gap",
        margin=2.9,
        note=STATED_GAP,
    ),
    Claim(
        id="fedgkd-gap-larger-on-sst5-than-agnews",
        paper="fedgkd",
        source="Table 4; Sec. 5.2, Effect of Network Architecture",
        quote="our proposed model still shows its superiority when the fine-tuning task turns "
        "difficult, which is shown on SST-5 results.",
        treatment="fedgkd",
        baseline="fedavg",
        tables=("fedgkd_table4", "table4"),
        trend=Trend("dataset", start="agnews", end="sst5"),
    ),
    # "our proposed methods ... the other methods": FedGKD, FedGKD-VOTE and FedGKD+ against each
    # baseline of Table 5 (the paper's own cells fall short four times: MOON ahead of FedGKD at
    # C 0.2 and of FedGKD-VOTE at C 0.3 and 0.4, FedDistill+ ahead of FedGKD-VOTE at C 0.4)
    *(
        Claim(
            id=f"{treatment}-beats-{baseline}-per-participation",
            paper="fedgkd",
            source="Table 5 (Best columns) and Fig. 3 bottom; Sec. 5.2, Impact of Participation "
            "Ratio",
            quote="With the participants number growing, our proposed methods constantly "
            "outperform the other methods",
            treatment=treatment,
            baseline=baseline,
            tables=TABLE5,
        )
        for treatment in PROPOSED
        for baseline in BASELINES
    ),  # fmt: skip
    Claim(
        id="fedgkd-final-beats-fedavg-per-participation",
        paper="fedgkd",
        source="Table 5 (Final columns); Sec. 5.2, Results Overview",
        quote="In Fig. 3, we give a brief comparison for FedAvg and FedGKD under various "
        "participation ratio setting, FedGKD constantly outperforms FedAvg.",
        treatment="fedgkd",
        baseline="fedavg",
        tables=TABLE5,
        metric="final",
    ),
    # "over other methods": the gap over each baseline of Table 5 (over FedGen the paper's own
    # gap shrinks, 0.99 at C=0.1 and 1.27 at C=0.4: registered as the paper says it)
    *(
        Claim(
            id="fedgkd-gap-grows-with-fewer-participants"
            if baseline == "fedavg"
            else f"fedgkd-gap-over-{baseline}-grows-with-fewer-participants",
            paper="fedgkd",
            source="Table 5 (Best columns); Sec. 5.2, Impact of Participation Ratio",
            quote="FedGKD shows its greater superiority over other methods when there are fewer "
            "participants.",
            treatment="fedgkd",
            baseline=baseline,
            tables=TABLE5,
            trend=Trend("participation", toward="low"),
        )
        for baseline in BASELINES
    ),  # fmt: skip
    Claim(
        id="fedgkd-overtakes-fedgkd+-as-participation-grows",
        paper="fedgkd",
        source="Table 5 (Best columns); Sec. 5.2, Comments on Projection Layer",
        quote="And in Tab. 5, we notice that with participation ratio growing, the performance of "
        "FedGKD beats FedGKD+",
        treatment="fedgkd",
        baseline="fedgkd+",
        tables=TABLE5,
        trend=Trend("participation", toward="high"),
    ),
    *(
        Claim(
            id=f"fedgkd-beats-{baseline}-at-each-round",
            paper="fedgkd",
            source="Table 6 (rounds 10, 20, 50, 100) and Fig. 4; Sec. 5.2, Results Overview",
            quote=CONSTANTLY,
            treatment="fedgkd",
            baseline=baseline,
            tables=TABLE6,
            metric="at_round",
            rounds_from=FEDGKD_DISTILS_FROM,
        )
        for baseline in ("fedavg", "fedprox")
    ),
    Claim(
        id="fedgkd-drops-less-than-fedavg",
        paper="fedgkd",
        source="Table 6 (round 100) against Table 3 (best round); Sec. 5.2, Robustness of the "
        "Methods",
        quote="Most of the evaluation methods drops over 20% accuracy on the last communication "
        "round compared to their best accuracy(shown in Tab. 3) except FedProx and FedGKD.",
        treatment="fedgkd",
        baseline="fedavg",
        tables=TABLE6,
        metric="drop",
        direction="lower",
    ),
    Claim(
        id="fedgkd+-drops-less-than-moon",
        paper="fedgkd",
        source="Table 6 (round 100) against Table 3 (best round); Sec. 5.2, Robustness of the "
        "Methods",
        quote="Compared to MOON, which also learns from global model, FedGKD+ shows a more robust "
        "training process.",
        treatment="fedgkd+",
        baseline="moon",
        tables=TABLE6,
        metric="drop",
        direction="lower",
    ),
    # "five state-of-the-art methods": each of them a configuration runs to a target (FedAvg
    # and FedProx; MOON, FedDistill+ and FedGen have no rounds-to-target runs)
    *(
        Claim(
            id=f"fedgkd-fewer-rounds-than-{baseline}",
            paper="fedgkd",
            source="Abstract",
            quote="achieves superior empirical accuracy in fewer communication runs than five "
            "stateof-the-art methods.",
            treatment="fedgkd",
            baseline=baseline,
            tables=("rounds_to_target",),
            metric="rounds_to_target",
            direction="lower",
            note="of the five methods, those the rounds-to-target table runs (FedAvg, FedProx)",
        )
        for baseline in ("fedavg", "fedprox")
    ),
    Claim(
        id="fedgkd-buffer-5-beats-1",
        paper="fedgkd",
        source="Table 7 (CIFAR-10, α=1 and α=0.1); Sec. 5.3, Effect of Buffer Length Setting",
        quote="Setting M = 5 performs best on α = 1 and α = 0.1, which are higher than M = 1 "
        "over 0.5% on CIFAR-10.",
        treatment="M=5",
        baseline="M=1",
        tables=("fedgkd_table7", "table7"),
        where={"dataset": ("cifar10",), "alpha": (1.0, 0.1)},
        test="stated-gap",
        margin=0.5,
        note=OVER_OWN_GAP.format(measured="0.56 and 0.54"),
    ),
    Claim(
        id="fedgkd-vote-buffer-7-no-better-than-5",
        paper="fedgkd",
        source="Table 8; Sec. 5.3, Effect of Buffer Length Setting",
        quote="For FedGKD-VOTE, we find there is no more benefit by increasing the buffer length "
        "to 7",
        # "no more benefit from M = 7": M = 5 is not behind M = 7 by more than a benefit
        treatment="M=5",
        baseline="M=7",
        tables=("fedgkd_table8", "table8"),
        test="non-inferiority",
        margin=BENEFIT,
        note=f"a benefit is a gain over {BENEFIT:g} pp, the gain the same section reports for "
        "M = 5 over M = 1",
    ),
    *(
        Claim(
            id=f"fedgkd-{label.lower()}-beats-fedavg",
            paper="fedgkd",
            source=f"Table 9 ({label} row against None); Sec. 5.3, Choice of Regularizer",
            quote="As shown in Tab. 9, both choices outperform the FedAvg.",
            treatment=label,
            baseline="none",
            tables=("fedgkd_table9", "table9"),
        )
        for label in ("KL", "MSE")
    ),
    Claim(
        id="fedgkd-kl-beats-mse-cifar10",
        paper="fedgkd",
        source="Table 9 (CIFAR-10 column: 71.73 vs 70.12); Sec. 5.3, Choice of Regularizer",
        quote=REGULARIZER,
        treatment="KL",
        baseline="MSE",
        tables=("fedgkd_table9", "table9"),
        where={"dataset": ("cifar10",)},
        test="stated-gap",
        margin=1.6,  # the paper's own gap is 1.61
        note=STATED_GAP,
    ),
    Claim(
        id="fedgkd-mse-comparable-to-kl-sst5",
        paper="fedgkd",
        source="Table 9 (SST-5 column: 43.50 vs 43.24); Sec. 5.3, Choice of Regularizer",
        quote=REGULARIZER,
        treatment="MSE",
        baseline="KL",
        tables=("fedgkd_table9", "table9"),
        where={"dataset": ("sst5",)},
        test="equivalence",
        margin=COMPARABLE,
        note=f"comparable: within ±{COMPARABLE:g} pp, below the 1.6 points the same sentence "
        "calls worse or higher",
    ),
    Claim(
        id="fedgkd-mse-beats-kl-cifar100",
        paper="fedgkd",
        source="Table 9 (CIFAR-100 column: 38.19 vs 36.50); Sec. 5.3, Choice of Regularizer",
        quote=REGULARIZER,
        treatment="MSE",
        baseline="KL",
        tables=("fedgkd_table9", "table9"),
        where={"dataset": ("cifar100",)},
        test="stated-gap",
        margin=1.6,  # the paper's own gap is 1.69
        note=STATED_GAP,
    ),
)
