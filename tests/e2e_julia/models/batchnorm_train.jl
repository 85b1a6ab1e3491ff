# BatchNorm in training mode: batch statistics, and the running mean and variance as new state.
include("common.jl")
rng = Random.Xoshiro(1)
model = Chain(Dense(3 => 4), BatchNorm(4, relu), Dense(4 => 2))
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 3, 6)
export_mode = :train
metadata = lux_reference(model, ps, st, x; mode=export_mode)
