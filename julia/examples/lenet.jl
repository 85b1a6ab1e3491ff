# LeNet-5, exported from real Julia as a Julia export directory (docs/julia-export.md). As a
# program:
#   julia --project=julia -e 'using Pkg; Pkg.instantiate()'     # once: installs Reactant, Lux, ...
#   julia --project=julia julia/examples/lenet.jl [OUT_DIR]
# (default OUT_DIR: ./lenet.jlexport). As the script `juliabridge export` takes (a file that
# defines `model`, `ps`, `st` and `x`, and may define `name` and `metadata`):
#   juliabridge export julia/examples/lenet.jl --out lenet.jlexport
# The export at the end runs only when this file is the program: inside `juliabridge export`'s
# driver (whose ARGS hold its request file, not an output directory) it only defines the model.
# Then in Python: `juliabridge.import_lux("lenet.jlexport")`, or
# `juliabridge convert lenet.jlexport --out lenet.bundle` for a format-3 bundle.
#
# This never writes juliabridge/examples/lenet.bundle: that bundle is made without Julia by
# tools/make_example_bundles.py, and the Python tests compare it with its generator.
using JuliaBridge
using Lux
using Random

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
x = randn(rng, Float32, 28, 28, 1, 4)     # Julia's layout: width, height, channels, batch
name = "lenet"
metadata = Dict("kind" => "lenet", "seed" => 0)

if abspath(PROGRAM_FILE) == @__FILE__   # run as `julia lenet.jl`, not inside another program
    out = abspath(get(filter(a -> !startswith(a, "--"), ARGS), 1, "lenet.jlexport"))
    path = JuliaBridge.export_lux(
        out, model, ps, st, x;
        name=name,
        overwrite=true,
        metadata=metadata,
        progress=(i, n, msg) -> println("[$i/$n] $msg"),
    )
    println("wrote ", path)
end
