# The 2025 combinations check_reference.sh adds (sourced by it): every new norm, layout and
# attention option of src/model/README.md, alone and combined. Same format as the existing cases:
# "LAYOUT NORM [--set extra ...]".
#
# Optional init check (needs `--set train.save_init=true` in the case's training command): the
# step-0 checkpoint against the Initialisation rules of src/model/README.md, incl. Sub-LN's gamma:
#   $PY scripts/reference_model.py initcheck --run "$run" --step 0
# (statistical: sample std within max(8%, 6/sqrt(2n)) of the rule, constants exact to f32.)
cases_2025=()
# new norms, in the main stream and as QK-norm
cases_2025+=("pre derf")  # rmsnorm_free: in check_reference.sh already
cases_2025+=("sandwich derf --set model.norm.derf_alpha=0.8")
# new layouts
for layout in subln hybrid lns; do
  for norm in layernorm rmsnorm; do cases_2025+=("$layout $norm"); done
done
cases_2025+=("subln layernorm --set model.ffn=swiglu --set model.subln.gamma=1")
cases_2025+=("subln rmsnorm --set model.subln.gamma=2.5 --set model.bias=true")
cases_2025+=("hybrid rmsnorm --set model.hybrid.first_block_pre=true --set model.pos=rope")
cases_2025+=("hybrid layernorm --set model.qk_norm_type=rmsnorm_free --set model.qk_norm_axis=all")
cases_2025+=("lns rmsnorm --set init.scaled_residual=false --set model.ffn=swiglu")
cases_2025+=("lns derf --set model.pos=rope")
# LayerScale in each place it can sit
cases_2025+=("pre layernorm --set model.layerscale=0.1")
cases_2025+=("post layernorm --set model.layerscale=0.5")
cases_2025+=("deepnorm rmsnorm --set model.layerscale=0.5")
cases_2025+=("sandwich rmsnorm --set model.layerscale=0.1")
cases_2025+=("normformer layernorm --set model.layerscale=0.1 --set model.normformer.resid_scale=all")
cases_2025+=("reordered rmsnorm --set model.layerscale=0.1")
cases_2025+=("mix layernorm --set model.layerscale=0.1")
cases_2025+=("hybrid rmsnorm --set model.layerscale=0.1")
# QK-norm axis / position, v_norm
cases_2025+=("pre rmsnorm --set model.qk_norm=true --set model.qk_norm_axis=all")
cases_2025+=("pre rmsnorm --set model.qk_norm=true --set model.qk_norm_position=after_rope --set model.pos=rope")
cases_2025+=("pre layernorm --set model.qk_norm=true --set model.qk_norm_axis=all --set model.qk_norm_position=after_rope --set model.pos=rope --set model.v_norm=true")
cases_2025+=("pre rmsnorm --set model.v_norm=true")
cases_2025+=("pre layernorm --set model.qk_norm=true --set model.qk_norm_type=derf --set model.v_norm=true --set model.bias=true")
# feed-forward activations and NoPE
cases_2025+=("pre layernorm --set model.ffn=geglu")
cases_2025+=("pre rmsnorm --set model.ffn=relu2 --set model.pos=none")
cases_2025+=("subln layernorm --set model.ffn=geglu --set model.pos=none")
cases_2025+=("normformer rmsnorm --set model.ffn=relu2")
# attention gate
cases_2025+=("pre rmsnorm --set model.attn_gate=head")
cases_2025+=("pre layernorm --set model.attn_gate=elementwise --set model.bias=true --set model.pos=rope")
cases_2025+=("subln layernorm --set model.attn_gate=elementwise")
cases_2025+=("post layernorm --set model.attn_gate=head")
cases_2025+=("normformer rmsnorm --set model.attn_gate=head --set model.ffn=swiglu")
cases_2025+=("hybrid rmsnorm --set model.attn_gate=elementwise --set model.hybrid.first_block_pre=true")
# embed_scale (DyT's LLM recipe): with a point-wise norm, with embed_norm and an untied head, without positions
cases_2025+=("pre dyt --set model.embed_scale=5.66")
cases_2025+=("sandwich derf --set model.embed_scale=3 --set model.embed_norm=true --set model.tie_embeddings=false")
cases_2025+=("post layernorm --set model.embed_scale=2 --set model.pos=rope")
