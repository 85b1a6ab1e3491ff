# JuliaBridge tests: the flatten (ties, structs, empties, static leaves, refusals), the
# description and weights an export writes (against Lux's own CPU outputs), and load_params.
# Run with
#   julia --project=julia -e 'using Pkg; Pkg.instantiate(); Pkg.test()'
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
    end
end
