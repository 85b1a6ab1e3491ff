# Several inputs: x is a tuple, one array per branch of a Parallel layer.
include("common.jl")
rng = Random.Xoshiro(3)
model = Parallel(+, Dense(3 => 2), Dense(5 => 2, tanh))
ps, st = Lux.setup(rng, model)
x = (randn(rng, Float32, 3, 4), randn(rng, Float32, 5, 4))
export_mode = :test
metadata = lux_reference(model, ps, st, x; mode=export_mode)
