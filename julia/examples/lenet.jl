# Regenerate the example bundle shipped in the Python package from real Julia:
#   julia --project=julia julia/examples/lenet.jl [--vjp] [OUT_DIR]
# (default OUT_DIR: juliabridge/examples/lenet.bundle). The same LeNet as issue 3 and as the
# Python-made placeholder, with a fixed seed, traced in test mode; `--vjp` adds the pullback.
using JuliaBridge
using Lux
using Random

const WITH_VJP = "--vjp" in ARGS
const POSITIONAL = filter(a -> !startswith(a, "--"), ARGS)
const OUT = get(POSITIONAL, 1, joinpath(@__DIR__, "..", "..", "juliabridge", "examples", "lenet.bundle"))

rng = Random.Xoshiro(0)
model = Chain(
    Conv((5, 5), 1 => 6, relu),
    MaxPool((2, 2)),
    Conv((5, 5), 6 => 16, relu),
    MaxPool((2, 2)),
    FlattenLayer(3),
    Dense(256 => 128, relu),
    Dense(128 => 10),
)
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 28, 28, 1, 4)

path = JuliaBridge.export_lux(
    OUT, model, ps, st, x;
    name="lenet",
    overwrite=true,
    vjp=WITH_VJP,
    metadata=Dict("kind" => "lenet", "seed" => 0),
    progress=(i, n, msg) -> println("[$i/$n] $msg"),
)
println("wrote ", path)
