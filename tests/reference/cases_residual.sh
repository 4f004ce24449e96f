# shellcheck shell=bash
# The residual-stream combinations check_reference.sh adds (sourced by it): the residual types of
# src/model/README.md ("Residual streams": hc, mhc, attnres), the value residual, and the layouts
# that carry their own stream (ngpt, resi_dual), alone and composed with the additive layouts.
# Same format as the existing cases: "LAYOUT NORM [--set extra ...]".
cases_residual=()
ngpt="--set model.pos=rope --set model.ffn=swiglu --set model.tie_embeddings=false --set optim.weight_decay=0"
# hyper-connections: dynamic (default, 4 streams), static, one stream, with LayerScale in G_s
cases_residual+=("pre layernorm --set model.residual.type=hc")
cases_residual+=("pre rmsnorm --set model.residual.type=hc --set model.residual.dynamic=false")
cases_residual+=("sandwich layernorm --set model.residual.type=hc --set model.residual.streams=1")
cases_residual+=("reordered rmsnorm --set model.residual.type=hc --set model.layerscale=0.1")
# mHC: default (4 streams, 20 Sinkhorn iterations), short Sinkhorn with 2 streams, other layouts
cases_residual+=("pre rmsnorm --set model.residual.type=mhc")
cases_residual+=("pre layernorm --set model.residual.type=mhc --set model.residual.sinkhorn_iters=3 --set model.residual.streams=2")
cases_residual+=("lns rmsnorm --set model.residual.type=mhc")
cases_residual+=("normformer layernorm --set model.residual.type=mhc")
# Attention Residuals: Full (block 1) and Block AttnRes (2, 4), with an explicit norm eps
cases_residual+=("pre layernorm --set model.residual.type=attnres")
cases_residual+=("pre rmsnorm --set model.residual.type=attnres --set model.residual.attnres_block=2")
cases_residual+=("sandwich rmsnorm --set model.residual.type=attnres --set model.residual.attnres_block=4 --set model.norm.eps=0.001")
cases_residual+=("subln layernorm --set model.residual.type=attnres --set model.residual.attnres_block=2")
# value residual: each form, on the additive stream, a Post-LN layout and with hyper-connections
cases_residual+=("pre layernorm --set model.value_residual=fixed")
cases_residual+=("pre rmsnorm --set model.value_residual=scalar --set model.v_norm=true")
cases_residual+=("post layernorm --set model.value_residual=token --set model.bias=true")
cases_residual+=("pre rmsnorm --set model.value_residual=token --set model.residual.type=hc")
# layouts with their own stream
cases_residual+=("ngpt layernorm $ngpt")
cases_residual+=("ngpt layernorm $ngpt --set model.value_residual=scalar")
cases_residual+=("resi_dual layernorm")
cases_residual+=("resi_dual rmsnorm --set model.layerscale=0.5")
unset ngpt
# The same runs with every parameter perturbed after training (check_reference.sh's --perturb):
# 25 steps leave HC's and mHC's mixing weights and the value-residual gates so close to their
# init (C ~ 1/n, tanh terms ~ 0) that e.g. a transposed C or a swapped gate would still agree.
for c in "${cases_residual[@]}"; do cases_residual+=("$c --perturb"); done
