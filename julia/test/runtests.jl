# JuliaBridge tests: the flatten (ties, structs, empties, static leaves, refusals), the
# description and weights an export writes (against Lux's own CPU outputs), and load_params.
# Run with (without julia_args, Pkg.test recompiles the whole stack under --check-bounds=yes)
#   julia --project=julia -e 'using Pkg; Pkg.instantiate(); Pkg.test(; julia_args=["--check-bounds=auto"])'
using Test
using JuliaBridge
using JuliaBridge: ExportError, BundleReadError, Flattened, flatten!
using HDF5: HDF5
using JSON: JSON
using Lux
using Random
using Reactant: Reactant

const TMP = mktempdir()

# A struct that is not a NamedTuple/Tuple/Array: its fields are flattened by name.
struct Pair2{A,B}
    first::A
    second::B
end

# A layer with two inputs and bf16/Bool parameters.
struct TwoIn <: Lux.AbstractLuxLayer end
Lux.initialparameters(::AbstractRNG, ::TwoIn) = (w=JuliaBridge.BFloat16.(ones(Float32, 2)), mask=[true, false])
(::TwoIn)(x, ps, st) = (x[1] .* Float32.(ps.w) .+ x[2] .* ps.mask, st)

# Layers that change an argument in place: a state RNG drawn from without Lux.replicate, a
# state counter (kept, or dropped for another array), a parameter.
struct Noisy <: Lux.AbstractLuxLayer end
Lux.initialstates(::AbstractRNG, ::Noisy) = (rng=Random.Xoshiro(7),)
(::Noisy)(x, ps, st) = (x .+ rand!(st.rng, similar(x)), st)
struct Counter <: Lux.AbstractLuxLayer
    keep::Bool
end
Lux.initialstates(::AbstractRNG, ::Counter) = (count=zeros(Float32, 1),)
(c::Counter)(x, ps, st) = (st.count .+= 1; (x .* 2, c.keep ? st : (; count=st.count .+ 0)))
struct Doubler <: Lux.AbstractLuxLayer end
Lux.initialparameters(::AbstractRNG, ::Doubler) = (w=ones(Float32, 2),)
(::Doubler)(x, ps, st) = (ps.w .*= 2; (x .* ps.w, st))
# One state array at two paths (st = (a=s, b=s)): one new value for both, or two.
struct TwoStates <: Lux.AbstractLuxLayer
    same::Bool
end
(l::TwoStates)(x, ps, st) = (n = st.a .+ 1; (x .* 1, (a=n, b=l.same ? n : st.b .+ 2)))

message(f) = try
    f()
    ""
catch e
    sprint(showerror, e)
end
flat_of(x, ps, st) = (f = Flattened(); t = (flatten!(f, x, :x), flatten!(f, ps, :ps), flatten!(f, st, :st)); (f, t))
paths(f, role) = [a["path"] for a in f.args if a["role"] == role]
description(dir) = JSON.parsefile(joinpath(dir, "juliabridge-export.json"))
dataset(dir, name) = HDF5.h5open(f -> JuliaBridge.read_array(f, name), joinpath(dir, "weights.h5"))

@testset "JuliaBridge" begin
    @testset "flatten: order, names, ties, structs, empties, static leaves" begin
        w = randn(Float32, 3, 2)
        x = randn(Float32, 2, 5)
        ps = (layer_1=(weight=w, bias=zeros(Float32, 3)), layer_2=NamedTuple(), layer_3=(weight=w,), extra=Pair2(ones(2), (1.0f0 .* ones(Float32, 1),)))
        st = (layer_1=NamedTuple(), bn=(running_mean=zeros(Float32, 3), training=Val(false)), n=3, tag=:a, none=nothing)
        f, (xr, psr, str) = flat_of(x, ps, st)
        @test length(f.leaves) == 6                      # w once; x; bias; ones(2); the 1-vector; running_mean
        @test all(l -> l isa Reactant.ConcreteRArray, f.leaves)
        @test [a["index"] for a in f.args] == 0:5
        @test paths(f, "input") == [Any[]]
        @test paths(f, "parameter") == [["layer_1", "weight"], ["layer_1", "bias"], ["extra", "first"], ["extra", "second", 1]]
        @test f.args[2]["tied_paths"] == [["layer_3", "weight"]]
        @test f.args[2]["dataset"] == "/params/layer_1/weight" && f.args[2]["julia_shape"] == [3, 2] && f.args[2]["dtype"] == "f32"
        @test f.args[4]["dtype"] == "f64"
        @test paths(f, "state") == [["bn", "running_mean"]]
        @test f.empty == Dict("params" => [["layer_2"]], "state" => [["layer_1"]])
        @test [(s["path"], s["value"], s["julia_type"]) for s in f.static] ==
              [(["bn", "training"], false, "Val{false}"), (["n"], 3, "Int64"), (["tag"], "a", "Symbol"), (["none"], nothing, "Nothing")]
        @test psr.layer_1.weight === psr.layer_3.weight  # the tie survives the conversion
        @test psr.extra isa Pair2 && Array(psr.extra.first) == ones(2)
        @test str.bn.training === Val(false)
        # An array given twice as input is two inputs: a reader refuses tied inputs.
        g, _ = flat_of((x, x), NamedTuple(), NamedTuple())
        @test paths(g, "input") == [[1], [2]] && !any(a -> haskey(a, "tied_paths"), g.args)
    end

    @testset "flatten: what would be frozen or lose its role is refused" begin
        x = randn(Float32, 2, 4)
        @test_throws ExportError flat_of(x, (w=1.5f0,), NamedTuple())           # a float number in ps
        @test_throws ExportError flat_of(x, NamedTuple(), (scale=0.5,))         # and in st
        @test_throws ExportError flat_of(x, (names=["a", "b"],), NamedTuple())  # a non-numeric array
        @test_throws ExportError flat_of(x, (n=3,), NamedTuple())               # a setting outside st
        @test_throws ExportError flat_of(x, (w=x,), NamedTuple())               # x shared with ps
        @test_throws ExportError flat_of(x, (d=Dict("a" => x),), NamedTuple())  # Dict keys are no Lux names
        err = try
            flat_of(x, (w=1.5f0,), NamedTuple())
        catch e
            sprint(showerror, e)
        end
        @test occursin("ps.w", err) && occursin("constant", err)
        # Messages name the tree by its root (x, ps, st), not the argument's role.
        @test occursin("is also the input at x;", message(() -> flat_of(x, (w=x,), NamedTuple())))
        # A ps or st that is itself an array has no Lux path to name it.
        @test occursin("ps is itself an array", message(() -> flat_of(x, randn(Float32, 3), NamedTuple())))
        @test_throws ExportError flat_of(x, NamedTuple(), zeros(Float32, 2))
        @test paths(first(flat_of(x, [ones(Float32, 2)], NamedTuple())), "parameter") == [[1]]   # a vector of arrays has paths
    end

    @testset "flatten: RNGs are copied, converted and flattened" begin
        rng = Random.Xoshiro(1)
        before = copy(rng)
        f, (_, _, str) = flat_of(zeros(Float32, 1), NamedTuple(), (dropout=(rng=rng, training=Val(true)), again=(rng=rng,)))
        @test rng == before                              # the user's RNG did not advance
        @test paths(f, "state") == [["dropout", "rng", "seed"]]
        @test f.args[end]["tied_paths"] == [["again", "rng", "seed"]]
        @test str.dropout.rng isa Random.AbstractRNG
    end

    @testset "export: a Dense chain, its description and weights" begin
        rng = Random.Xoshiro(0)
        model = Chain(Dense(4 => 8, tanh), NoOpLayer(), Dense(8 => 2))
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 4, 3)
        dir = joinpath(TMP, "mlp.jlexport")
        steps = Int[]
        @test export_lux(dir, model, ps, st, x; metadata=Dict("k" => 1), progress=(i, n, _) -> push!(steps, i)) == dir
        @test steps == 1:4
        @test sort(readdir(dir)) == ["juliabridge-export.json", "model.mlir", "weights.h5"]
        d = description(dir)
        @test d["format"] == "juliabridge.julia-export" && d["format_version"] == 1
        @test d["name"] == "mlp" && d["mode"] == "test" && d["module"]["file"] == "model.mlir"
        @test d["producer"]["reactant"] == string(pkgversion(Reactant)) && d["producer"]["lux"] == string(pkgversion(Lux))
        @test [a["path"] for a in d["arguments"]] == [[], ["layer_1", "weight"], ["layer_1", "bias"], ["layer_3", "weight"], ["layer_3", "bias"]]
        @test [r["path"] for r in d["results"]] == [["output"]]
        @test d["empty"]["params"] == [["layer_2"]] && d["empty"]["state"] == [["layer_1"], ["layer_2"], ["layer_3"]]
        @test d["metadata"]["k"] == 1
        @test occursin("func.func @main", read(joinpath(dir, "model.mlir"), String))
        @test dataset(dir, "/params/layer_1/weight") == ps.layer_1.weight
        @test dataset(dir, "/examples/inputs/0") == x
        y, _ = model(x, ps, Lux.testmode(st))          # Lux on CPU arrays, independent of Reactant
        @test dataset(dir, "/examples/outputs/0") ≈ y rtol = 1e-5
        HDF5.h5open(joinpath(dir, "weights.h5")) do f
            @test HDF5.attrs(f["/params/layer_1/weight"])["dtype"] == "f32"
        end
        @test_throws ArgumentError export_lux(dir, model, ps, st, x)    # exists, no overwrite
        @test export_lux(model, ps, st, x; out=dir, overwrite=true, reference=false) == dir
        @test !haskey(description(dir), "examples")
    end

    @testset "export: BatchNorm in train mode returns its new state" begin
        model = Chain(Dense(3 => 4), BatchNorm(4))
        ps, st = Lux.setup(Random.Xoshiro(0), model)
        x = randn(Random.Xoshiro(1), Float32, 3, 6)
        dir = export_lux(joinpath(TMP, "bn"), model, ps, st, x; mode=:train)
        d = description(dir)
        @test [r["path"] for r in d["results"]] == [["output"], ["state", "layer_2", "running_mean"], ["state", "layer_2", "running_var"]]
        @test any(s -> s["path"] == ["layer_2", "training"] && s["value"] == true, d["static_state"])
        _, st_new = model(x, ps, Lux.trainmode(st))
        @test dataset(dir, "/examples/outputs/1") ≈ st_new.layer_2.running_mean rtol = 1e-5
        @test_throws ArgumentError export_lux(joinpath(TMP, "bn2"), model, ps, st, x; mode=:train, samples_independent=true)
    end

    @testset "export: several inputs, bf16 and Bool weights" begin
        ps, st = Lux.setup(Random.Xoshiro(0), TwoIn())
        dir = export_lux(joinpath(TMP, "two"), TwoIn(), ps, st, ones(Float32, 2), ones(Float32, 2))
        d = description(dir)
        @test [a["path"] for a in d["arguments"] if a["role"] == "input"] == [[1], [2]]
        @test [a["dtype"] for a in d["arguments"] if a["role"] == "parameter"] == ["bf16", "i1"]
        HDF5.h5open(joinpath(dir, "weights.h5")) do f
            @test eltype(read(f["/params/w"])) == UInt16 && eltype(read(f["/params/mask"])) == UInt8
        end
        @test dataset(dir, "/params/w") == ps.w && dataset(dir, "/params/mask") == ps.mask
    end

    @testset "export: LeNet (conv, pooling, flatten) from the shipped example as a script" begin
        s = JuliaBridge.load_script(joinpath(pkgdir(JuliaBridge), "examples", "lenet.jl"))
        dir = export_lux(joinpath(TMP, "lenet"), s.model, s.ps, s.st, s.x; name=s.name, metadata=s.metadata)
        d = description(dir)
        @test d["name"] == "lenet" && d["metadata"]["kind"] == "lenet"
        @test [a["path"] for a in d["arguments"]] == [[], ["layer_1", "weight"], ["layer_1", "bias"], ["layer_3", "weight"], ["layer_3", "bias"],
                                                      ["layer_6", "weight"], ["layer_6", "bias"], ["layer_7", "weight"], ["layer_7", "bias"]]
        @test d["arguments"][2]["julia_shape"] == [5, 5, 1, 6] && d["empty"]["params"] == [["layer_2"], ["layer_4"], ["layer_5"]]
        @test occursin("stablehlo.convolution", read(joinpath(dir, "model.mlir"), String))
        y, _ = s.model(s.x, s.ps, Lux.testmode(s.st))     # Lux on CPU arrays
        @test size(y) == (10, 4)
        @test dataset(dir, "/examples/outputs/0") ≈ y rtol = 1e-4 atol = 1e-5
        ps2, st2 = load_params(dir)                        # no templates: empties from the description
        @test first(s.model(s.x, ps2, st2)) ≈ y rtol = 1e-5
    end

    @testset "export: arguments changed in place are new state or refused" begin
        x = randn(Random.Xoshiro(2), Float32, 2, 3)
        ps, st = Lux.setup(Random.Xoshiro(0), Noisy())
        before = copy(st.rng)
        dir = export_lux(joinpath(TMP, "noisy"), Noisy(), ps, st, x)
        d = description(dir)
        @test [r["path"] for r in d["results"]] == [["output"], ["state", "rng", "seed"]]
        @test st.rng == before                             # the user's RNG did not advance
        seed = dataset(dir, "/state/rng/seed")             # written before the reference run
        @test seed != dataset(dir, "/examples/outputs/1")  # the draw advanced the copy's seed
        @test dataset(export_lux(joinpath(TMP, "noisy2"), Noisy(), ps, st, x), "/state/rng/seed") == seed
        ps, st = Lux.setup(Random.Xoshiro(0), Counter(true))
        dir = export_lux(joinpath(TMP, "counter"), Counter(true), ps, st, x)
        @test dataset(dir, "/state/count") == [0.0f0] && dataset(dir, "/examples/outputs/1") == [1.0f0]
        @test dataset(dir, "/examples/outputs/0") ≈ 2 .* x
        @test st.count == [0.0f0]
        @test occursin("changes st.count in place but returns another array", message(() -> export_lux(joinpath(TMP, "c2"), Counter(false), ps, st, x)))
        ps, st = Lux.setup(Random.Xoshiro(0), Doubler())
        @test occursin("changes ps.w in place", message(() -> export_lux(joinpath(TMP, "d"), Doubler(), ps, st, x)))
        @test ps.w == ones(Float32, 2)
    end

    @testset "export: one state array at two paths gets one new value" begin
        x = ones(Float32, 2, 1)
        s = zeros(Float32, 2)
        dir = export_lux(joinpath(TMP, "tied_state"), TwoStates(true), NamedTuple(), (a=s, b=s), x)
        d = description(dir)
        @test [a["path"] for a in d["arguments"]] == [[], ["a"]] && d["arguments"][2]["tied_paths"] == [["b"]]
        @test [r["path"] for r in d["results"]] == [["output"], ["state", "a"]] && dataset(dir, "/examples/outputs/1") == [1.0f0, 1.0f0]
        err = message(() -> export_lux(joinpath(TMP, "tied_state2"), TwoStates(false), NamedTuple(), (a=s, b=s), x))
        @test occursin("st.a and st.b are one array in st", err)
    end

    @testset "export: a StatefulLuxLayer is unwrapped" begin
        model = Chain(Dense(2 => 3, tanh), Dense(3 => 1))
        ps, st = Lux.setup(Random.Xoshiro(0), model)
        x = randn(Random.Xoshiro(1), Float32, 2, 4)
        dir = export_lux(joinpath(TMP, "stateful"), StatefulLuxLayer{true}(model, ps, st), nothing, nothing, x)
        @test [a["path"] for a in description(dir)["arguments"]][2:end] == [["layer_1", "weight"], ["layer_1", "bias"], ["layer_2", "weight"], ["layer_2", "bias"]]
        @test dataset(dir, "/examples/outputs/0") ≈ first(model(x, ps, st)) rtol = 1e-5
        @test_throws ExportError export_lux(joinpath(TMP, "stateful2"), StatefulLuxLayer{true}(model, nothing, st), nothing, nothing, x)
    end

    @testset "load_params: by template, from an export directory, from a Python-style file" begin
        model = Chain(Dense(2 => 3), BatchNorm(3), NoOpLayer())
        ps, st = Lux.setup(Random.Xoshiro(0), model)
        dir = export_lux(joinpath(TMP, "lp"), model, ps, st, randn(Float32, 2, 4))
        ps2, st2 = load_params(dir, ps, st)
        @test ps2 == ps && st2.layer_2.running_var == st.layer_2.running_var && st2.layer_2.training === st.layer_2.training
        ps3, st3 = load_params(dir)
        @test ps3.layer_1.weight == ps.layer_1.weight && ps3.layer_3 == NamedTuple()
        @test st3.layer_2.training === Val(false) && keys(st3) == (:layer_1, :layer_2, :layer_3)
        # A weights file as juliabridge.save_params writes it: groups and datasets, no description.
        file = joinpath(TMP, "finetuned.h5")
        HDF5.h5open(file, "w") do f
            JuliaBridge.write_array(f, "/params/layer_1/weight", ps.layer_1.weight .+ 1)
            JuliaBridge.write_array(f, "/params/layer_1/bias", ps.layer_1.bias)
            JuliaBridge.write_array(f, "/params/layer_2/scale", ps.layer_2.scale)
            JuliaBridge.write_array(f, "/params/layer_2/bias", ps.layer_2.bias)
            JuliaBridge.write_array(f, "/state/layer_2/running_mean", st.layer_2.running_mean)
            JuliaBridge.write_array(f, "/state/layer_2/running_var", st.layer_2.running_var)
        end
        ps4, st4 = load_params(file, ps, st)
        @test ps4.layer_1.weight == ps.layer_1.weight .+ 1 && ps4.layer_3 == NamedTuple() && st4.layer_2.training === st.layer_2.training
        @test_throws BundleReadError load_params(file, (layer_1=(weight=zeros(Float32, 9),),), NamedTuple())
        @test_throws BundleReadError load_params(joinpath(TMP, "missing.h5"))
        ps5, _ = load_params(file)
        @test ps5.layer_1.weight == ps4.layer_1.weight
    end

    @testset "load_params: a save_params file's tree record restores empty layers" begin
        model = Chain(Conv((3, 3), 1 => 2, relu), MaxPool((2, 2)), FlattenLayer(3), Dense(8 => 2))
        ps, st = Lux.setup(Random.Xoshiro(0), model)
        x = randn(Random.Xoshiro(1), Float32, 6, 6, 1, 3)
        # As juliabridge.save_params writes it (docs/bundle-format.md §4.2): the record is JSON
        # bytes in a ui8 dataset, and names every empty container.
        record = Dict("params" => Dict("leaves" => [["layer_1", "weight"], ["layer_1", "bias"], ["layer_4", "weight"], ["layer_4", "bias"]],
                                       "empty" => [["layer_2"], ["layer_3"]]),
                      "state" => Dict("leaves" => [], "empty" => [["layer_1"], ["layer_2"], ["layer_3"], ["layer_4"]]))
        file = joinpath(TMP, "pooled.h5")
        HDF5.h5open(file, "w") do f
            for (l, k) in record["params"]["leaves"]
                JuliaBridge.write_array(f, "/params/$l/$k", ps[Symbol(l)][Symbol(k)])
            end
            JuliaBridge.write_array(f, "/juliabridge/tree", Vector{UInt8}(JSON.json(record)))
        end
        ps2, st2 = load_params(file)
        @test keys(ps2) == keys(ps) && ps2.layer_2 == NamedTuple() && keys(st2) == keys(st)
        @test first(model(x, ps2, st2)) ≈ first(model(x, ps, st)) rtol = 1e-6
        HDF5.h5open(file, "r+") do f
            HDF5.delete_object(f, "/juliabridge/tree")
            JuliaBridge.write_array(f, "/juliabridge/tree", Vector{UInt8}("[1, 2]"))
        end
        @test_throws BundleReadError load_params(file)
    end

    @testset "the subprocess driver: scripts and serialized objects" begin
        script = joinpath(TMP, "m.jl")
        write(joinpath(TMP, "layers.jl"), "make() = Dense(2 => 2)\n")
        write(script, "using Lux, Random\ninclude(\"layers.jl\")\nmodel = make()\nps, st = Lux.setup(Random.Xoshiro(0), model)\nx = ones(Float32, 2, 3)\nname = \"scripted\"\n")
        for (key, value) in (("script", script), ("serialized", joinpath(TMP, "objects.jls")))
            if key == "serialized"
                model = Dense(2 => 2)
                ps, st = Lux.setup(Random.Xoshiro(0), model)
                open(io -> JuliaBridge.Serialization.serialize(io, (model, ps, st, [ones(Float32, 2, 3)])), value, "w")
            end
            req = joinpath(TMP, "request.json")
            out = joinpath(TMP, "driven_$key")
            write(req, JSON.json(Dict(key => value, "out" => out, "result_file" => joinpath(TMP, "result.json"), "packages" => [["Lux", string(Base.PkgId(Lux).uuid)]])))
            @test JuliaBridge.run_request(req) == 0
            @test JSON.parsefile(joinpath(TMP, "result.json"))["path"] == out
            @test description(out)["name"] == (key == "script" ? "scripted" : "driven_serialized")
        end
        # The shipped example as a script, with ARGS holding the request file as in the driver's
        # process: lenet.jl exports only as the program, so only the driver's export runs.
        req, out = joinpath(TMP, "request_lenet.json"), joinpath(TMP, "driven_lenet")
        write(req, JSON.json(Dict("script" => joinpath(pkgdir(JuliaBridge), "examples", "lenet.jl"), "out" => out, "result_file" => joinpath(TMP, "result.json"))))
        push!(ARGS, req)
        try
            @test JuliaBridge.run_request(req) == 0
        finally
            pop!(ARGS)
        end
        @test JSON.parsefile(joinpath(TMP, "result.json"))["ok"] && description(out)["name"] == "lenet"
        @test !ispath(abspath("lenet.jlexport"))
    end
end
