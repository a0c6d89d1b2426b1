"""Names of the per-trajectory numbers read from analysis results and indexed by the store (filters, predictors)."""

MARGIN_SCORE = "tool_margin"  # smallest final-layer margin of a chosen tool name
LENS_SETTLE_SCORE = "lens_settle_layer"  # latest layer where a chosen tool name settles as top-1
ENTROPY_SCORE = "decision_entropy"  # mean final-layer entropy at tool names and argument values
OBS_ATTENTION_SCORE = "obs_attention_share"  # attention share on the latest observation at decision tokens
# Which analyzer's result gives which numbers.
SCORES_OF = {
    "tool_decision": (MARGIN_SCORE,),
    "logit_lens": (LENS_SETTLE_SCORE, ENTROPY_SCORE),
    "attention": (OBS_ATTENTION_SCORE,),
}
