"""Run-level statistics: pass@k and flakiness, paired A/B comparison, step alignment, failure
predictors and annotator agreement (a team's: the agent blamed and the step).

Pure compute on plain Python data; numpy, scipy and statsmodels load only inside the functions that use them.
"""

from evalrx.runstats.agreement import (
    agreement,
    attribution_agreement,
    cohen_kappa,
    fleiss_kappa,
    kind_confusion,
    step_agreement,
    wilson_share,
)
from evalrx.runstats.alignment import Alignment, action_steps, actions_of, align, changed_keys, normalize_args
from evalrx.runstats.paired import PairedComparison, bootstrap_mean_ci, compare_outcomes
from evalrx.runstats.passk import CaseRate, Reliability, pass_at_k, pass_hat_k, reliability
from evalrx.runstats.predictors import Predictor, predictors, signal_value

__all__ = [
    "Alignment",
    "CaseRate",
    "PairedComparison",
    "Predictor",
    "Reliability",
    "action_steps",
    "actions_of",
    "agreement",
    "attribution_agreement",
    "align",
    "bootstrap_mean_ci",
    "changed_keys",
    "cohen_kappa",
    "compare_outcomes",
    "fleiss_kappa",
    "kind_confusion",
    "normalize_args",
    "pass_at_k",
    "pass_hat_k",
    "predictors",
    "reliability",
    "signal_value",
    "step_agreement",
    "wilson_share",
]
