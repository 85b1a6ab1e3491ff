# A StatefulLuxLayer as the model: it carries its own ps and st.
include("common.jl")
rng = Random.Xoshiro(6)
inner = Chain(Dense(3 => 4, tanh), Dense(4 => 2))
ps, st = Lux.setup(rng, inner)
model = StatefulLuxLayer{true}(inner, ps, Lux.testmode(st))
x = randn(rng, Float32, 3, 5)
export_mode = :test
metadata = lux_reference(inner, ps, st, x; mode=export_mode)   # the layer it wraps, by Lux
