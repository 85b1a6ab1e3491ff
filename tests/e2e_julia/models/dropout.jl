# Dropout: its state holds an RNG (a ui64 seed argument) and `training`, a static setting.
include("common.jl")
rng = Random.Xoshiro(5)
model = Chain(Dense(4 => 8, relu), Dropout(0.5f0), Dense(8 => 2))
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 4, 6)
export_mode = :test
metadata = lux_reference(model, ps, st, x; mode=export_mode)
