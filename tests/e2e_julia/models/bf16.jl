# bf16 weights and input (Reactant's BFloat16 type, which JuliaBridge exports as bf16).
include("common.jl")
using JuliaBridge: JuliaBridge
const BF16 = JuliaBridge.BFloat16
rng = Random.Xoshiro(4)
model = Dense(4 => 3)
ps32, st = Lux.setup(rng, model)
ps = (weight=BF16.(ps32.weight), bias=BF16.(ps32.bias))
x = BF16.(randn(rng, Float32, 4, 5))
export_mode = :test
metadata = lux_reference(model, ps, st, x; mode=export_mode)
