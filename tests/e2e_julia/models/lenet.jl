# LeNet-5 (convolutions, pooling, an empty FlattenLayer state), test mode.
include("common.jl")
rng = Random.Xoshiro(0)
model = Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu),
              MaxPool((2, 2)), FlattenLayer(3), Dense(256 => 128, relu), Dense(128 => 10))
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 28, 28, 1, 4)
export_mode = :test
metadata = lux_reference(model, ps, st, x; mode=export_mode)
