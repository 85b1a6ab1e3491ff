# Export LeNet-5 from real Julia as a Julia export directory (docs/julia-export.md):
#   julia --project=julia -e 'using Pkg; Pkg.instantiate()'     # once: installs Reactant, Lux, ...
#   julia --project=julia julia/examples/lenet.jl [OUT_DIR]
# (default OUT_DIR: ./lenet.jlexport). Then in Python: `juliabridge.import_lux("lenet.jlexport")`,
# or `juliabridge convert lenet.jlexport --out lenet.bundle` for a format-3 bundle.
#
# This never writes juliabridge/examples/lenet.bundle: that bundle is made without Julia by
# tools/make_example_bundles.py, and the Python tests compare it with its generator.
using JuliaBridge
using Lux
using Random

const OUT = abspath(get(filter(a -> !startswith(a, "--"), ARGS), 1, "lenet.jlexport"))

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
    metadata=Dict("kind" => "lenet", "seed" => 0),
    progress=(i, n, msg) -> println("[$i/$n] $msg"),
)
println("wrote ", path)
