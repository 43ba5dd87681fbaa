"""The checks of the stability tree: each measures one thing on the run's Evidence and says whether it
matched its threshold (analysis/thresholds.py), with the measured value in words.

A node's check answers its question; a leaf's rule-out checks look for evidence that contradicts the leaf
(the walker then moves on instead of naming it). `near` says how close a check that did not match came to
its threshold (1 = at it), so the walker can name the closest leaves when it answers `unknown`.

One module per part of the tree, one import surface here (`from minitrain.analysis import checks as C`):
finding.py (what a check returns), run_lr_loss.py (§1-§3), batch_init.py (§4-§5), optimizer_gradient.py
(§6-§7), silent.py (§9), rule_outs.py (the §2-§6 leaves' rule-outs), natural.py (§2.6-§2.8 and their rule-outs),
logged.py (§2.9, §4.4, §4.5, §7.5 and §7.6: the loss, LR and norm alone, where the richer signals were not measured).
"""

from minitrain.analysis.checks.finding import (  # noqa: F401
    Crossing, EXACT, X_THRESHOLD, SIGMA, Finding, miss, near_ratio,
)
from minitrain.analysis.checks.run_lr_loss import (  # noqa: F401
    check_loss0_high, check_loss0_low, check_loss0_band, first_step_gn, check_gn1_high, check_gn1_low,
    check_lr_constant, check_lr_zero, check_no_warmup, check_lr_jump, peak_update_ratio, check_update_ratio,
    check_nonfinite,
    val_points, train_smooth, check_mask, leak_onset, check_target_leak, check_not_learning,
)
from minitrain.analysis.checks.batch_init import (  # noqa: F401
    check_dup_rows, check_data_outlier, check_stuck_loader, check_logit0, check_came_from_s1,
)
from minitrain.analysis.checks.optimizer_gradient import (  # noqa: F401
    v_threshold, check_v_factor, check_v_up, check_v_regime, clipping_case, check_gn_all_up, check_gn_all_down,
    check_gn_huge, check_loss_jump,
)
from minitrain.analysis.checks.rule_outs import (  # noqa: F401
    rule_out_lr_too_large, rule_out_updates_above_course, rule_out_collapse_after_best_val,
    rule_out_val_not_climbing, rule_out_val_above_untrained, rule_out_v_spread, rule_out_loss0_below_chance,
)
from minitrain.analysis.checks.natural import (  # noqa: F401
    natural_series, loss_degraded, check_attn_logit_growth, check_logz_drift, rms_series, RMS_LEAD,
    check_rms_before_spike, rule_out_logits_large_from_start, rule_out_v_left_recurrence,
)
from minitrain.analysis.checks.silent import (  # noqa: F401
    check_grads_carried, check_update_not_applied, check_frozen_parameters, check_loss_reduction,
    check_ranks_diverged,
)
from minitrain.analysis.checks.logged import (  # noqa: F401
    check_loss_memorised_run, check_gn_scaled, check_lr_too_high_loss, lr_loss_reading, check_loss_climb_after_scale,
    check_interval_outlier,
)
