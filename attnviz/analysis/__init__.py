"""What is computed from attention and the residual stream: head scores, rollout, ablation, patching,
gradients, explanations, saturation, comparisons and generation."""
