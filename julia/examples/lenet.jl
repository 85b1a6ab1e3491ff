# Export LeNet-5 from real Julia:
#   julia --project=julia julia/examples/lenet.jl [--vjp] [OUT_DIR]
# (default OUT_DIR: ./lenet.bundle, in the current directory). The same LeNet as the Python
# tests use, with a fixed seed, traced in test mode; `--vjp` adds the pullback.
#
# This never writes juliabridge/examples/lenet.bundle: that bundle is made without Julia by
# tools/make_example_bundles.py (its weights come from a Python generator, and the Python tests
# compare it with that generator and use its vjp.mlir), so a Julia export there would break them.
using JuliaBridge
using Lux
using Random

const WITH_VJP = "--vjp" in ARGS
const POSITIONAL = filter(a -> !startswith(a, "--"), ARGS)
const OUT = abspath(get(POSITIONAL, 1, "lenet.bundle"))
const SHIPPED = normpath(joinpath(@__DIR__, "..", "..", "juliabridge", "examples", "lenet.bundle"))

rstrip(OUT, '/') == SHIPPED && error("$OUT is the bundle shipped with the Python package; regenerate it with tools/make_example_bundles.py")

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
