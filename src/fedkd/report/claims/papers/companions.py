"""The companion papers' main claims: FedNTD (Lee et al.), FedCAD (He et al.) and FedDF (Lin et
al.), each as its text (fedntd.txt, fedcad.txt, feddf.txt) words it."""

from __future__ import annotations

from fedkd.report.claims.claim import Claim

FEDNTD_TABLE = ("forgetting", "fedntd_table1")
FEDCAD_FIGURE = ("fedcad",)
FEDDF_TABLE = ("feddf_table1", "rounds_to_target")
FEDDF_FEWER = "In all scenarios, FedDF requires significantly fewer communication rounds than"

CLAIMS = (
    Claim(
        id="fedntd-beats-fedavg",
        paper="fedntd",
        source="Table 1 (Sharding and LDA, CIFAR-10); Sec. 4.2, Performance on Data Heterogeneity",
        quote="our FedNTD consistently outperforms the baselines on all setups, achieving "
        "state-of-the-art results in most cases.",
        treatment="fedntd",
        baseline="fedavg",
        tables=FEDNTD_TABLE,
        metric="final",
    ),
    Claim(
        id="fedntd-forgets-less-than-fedavg",
        paper="fedntd",
        source="Table 1 (forgetting in parentheses), Sec. 4.2; Sec. 5, Knowledge preservation of "
        "FedNTD",
        quote="FedNTD significantly improves the local accuracy on out-local distribution , "
        "which implies it prevents forgetting.",
        treatment="fedntd",
        baseline="fedavg",
        tables=FEDNTD_TABLE,
        metric="forgetting",
        direction="lower",
    ),
    Claim(
        id="fedcad-beats-fedlsd",
        paper="fedcad",
        source="Fig. 1(a) (global accuracy); Experiments, Quantitative Evaluation",
        quote="Then, it achieves a better accuracy benefit from the class-wise adaptive terms.",
        treatment="fedcad",
        baseline="fedlsd",
        tables=FEDCAD_FIGURE,
        metric="final",
    ),
    Claim(
        id="fedcad-beats-fedavg",
        paper="fedcad",
        source="Abstract; Fig. 1(a)",
        quote="Experiments show that our method outperforms other state-of-the-art FL algorithms "
        "on benchmark datasets.",
        treatment="fedcad",
        baseline="fedavg",
        tables=FEDCAD_FIGURE,
        metric="final",
    ),
    Claim(
        id="fedcad-local-beats-fedavg",
        paper="fedcad",
        source="Fig. 1(b) (local average accuracy); Experiments, Quantitative Evaluation",
        quote="the local average accuracy of FedCAD and FedLSD outperforms the other approach",
        treatment="fedcad",
        baseline="fedavg",
        tables=FEDCAD_FIGURE,
        metric="local_final",
    ),
    *(
        Claim(
            id=f"feddf-fewer-rounds-than-{baseline}",
            paper="feddf",
            source="Table 1; Sec. 4.2, Evaluation on the Common Federated Learning Settings",
            quote=FEDDF_FEWER,
            treatment="feddf",
            baseline=baseline,
            tables=FEDDF_TABLE,
            metric="rounds_to_target",
            direction="lower",
        )
        for baseline in ("fedavg", "fedprox", "fedavgm")
    ),
)
