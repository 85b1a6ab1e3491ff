# One weight array at two places of ps (a tie): one argument, both paths.
include("common.jl")
rng = Random.Xoshiro(2)
model = Chain(Dense(4 => 4, tanh), Dense(4 => 4))
ps0, st = Lux.setup(rng, model)
ps = (layer_1=ps0.layer_1, layer_2=(weight=ps0.layer_1.weight, bias=ps0.layer_2.bias))
x = randn(rng, Float32, 4, 3)
export_mode = :test
metadata = lux_reference(model, ps, st, x; mode=export_mode)
