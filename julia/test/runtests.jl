# JuliaBridge tests: export each model, then check the bundle against the MLIR signature, the
# HDF5 file, Lux's own CPU outputs, and load_params. Run with
#   julia --project=julia -e 'using Pkg; Pkg.test()'
using Test
using JuliaBridge
using JuliaBridge: main_signature, unsupported_ops, decode_from_hdf5, julia_eltype
using HDF5: HDF5
using JSON: JSON
using Lux
using Random
using Reactant: Reactant

const TMP = mktempdir()

# The value at a bundle path (names and 1-based positions) of a Julia value.
function at_path(v, path)
    for s in path
        v = s isa Integer ? v[s] : (v isa AbstractDict ? v[s] : getproperty(v, Symbol(s)))
    end
    return v
end

# Lux's own CPU output (y, st_new) addressed like bundle result paths ["output", ...].
at_output(y, st, path) = first(path) == "output" ? at_path(y, path[2:end]) : at_path(st, path[2:end])

read_manifest(dir) = JSON.parsefile(joinpath(dir, "manifest.json"))

function read_dataset(dir, dspath)
    return HDF5.h5open(joinpath(dir, "weights.h5"), "r") do f
        JuliaBridge.read_array(f, dspath)
    end
end

function input_value(x, path)
    return isempty(path) ? x : at_path(x, path)
end

# Runs a StableHLO module inside a Reactant trace (R src/Ops.jl:2024).
call_module(code, args...) = Reactant.Ops.hlo_call(code, args...)

approx(a, b, T) = isapprox(Float64.(a), Float64.(b); rtol=(T <: Float64 ? 1e-8 : 1e-4), atol=(T <: Float64 ? 1e-10 : 1e-5))

"""Export `model` and check everything issue 3 asks for; returns the bundle path."""
function export_and_check(tag, model, ps, st, x; mode=:test, vjp=false)
    dir = joinpath(TMP, "$tag.bundle")
    path = export_lux(dir, model, ps, st, x; mode, vjp, overwrite=true)
    @test path == dir
    m = read_manifest(dir)
    text = read(joinpath(dir, "model.mlir"), String)
    sig = main_signature(text)
    T = eltype(x)

    @testset "$tag: manifest agrees with the MLIR signature" begin
        @test m["format"] == "juliabridge.bundle"
        @test m["format_version"] == 1
        @test m["mode"] == string(mode)
        @test m["producer"]["made_with_julia"] == true
        @test length(m["arguments"]) == length(sig.args)
        for (i, a) in enumerate(m["arguments"])
            @test a["index"] == i - 1
            @test sig.args[i].shape == a["shape"]
            @test sig.args[i].dtype == a["dtype"]
            @test reverse(a["shape"]) == a["julia_shape"]
        end
        @test length(m["results"]) == length(sig.results)
        for (k, r) in enumerate(m["results"])
            @test r["index"] == k - 1
            @test sig.results[k].shape == r["shape"]
            @test sig.results[k].dtype == r["dtype"]
        end
        @test isempty(unsupported_ops(text))
        @test JuliaBridge.file_sha256(joinpath(dir, "model.mlir")) == m["module"]["sha256"]
        @test JuliaBridge.file_sha256(joinpath(dir, "weights.h5")) == m["weights"]["sha256"]
        roles = [a["role"] for a in m["arguments"]]
        @test issorted(roles; by=r -> findfirst(==(r), ["input", "parameter", "state"]))
    end

    @testset "$tag: HDF5 shapes equal MLIR shapes" begin
        HDF5.h5open(joinpath(dir, "weights.h5"), "r") do f
            for a in m["arguments"]
                a["role"] == "input" && continue
                d = f[a["dataset"]]
                # HDF5.jl reverses the file's dims on read (HDF5 src/dataspaces.jl:58-63), so the
                # file (h5py) shape is reverse(size(d)), which must be the MLIR shape.
                @test collect(reverse(size(d))) == a["shape"]
                @test HDF5.attrs(d)["dtype"] == a["dtype"]
                close(d)
            end
        end
    end

    @testset "$tag: reference outputs equal Lux's CPU outputs" begin
        st_mode = mode === :test ? Lux.testmode(st) : Lux.trainmode(st)
        y, st_new = model(x, ps, st_mode)
        for o in m["examples"]["outputs"]
            r = m["results"][o["result"] + 1]
            ref = read_dataset(dir, o["dataset"])
            @test size(ref) == Tuple(r["julia_shape"])
            for p in r["paths"]
                @test approx(ref, at_output(y, st_new, p), T)
            end
        end
        for al in m["aliases"]
            a = m["arguments"][al["argument"] + 1]
            a["dtype"] == "ui64" && continue      # an RNG seed: the CPU run keeps a Xoshiro instead
            source = a["role"] == "input" ? input_value(x, a["path"]) : at_path(a["role"] == "parameter" ? ps : st, a["path"])
            @test approx(at_output(y, st_new, al["path"]), source, T)
        end
        for i in m["examples"]["inputs"]
            a = m["arguments"][i["argument"] + 1]
            @test read_dataset(dir, i["dataset"]) == input_value(x, a["path"])
        end
    end

    @testset "$tag: load_params round-trips" begin
        ps2, st2 = load_params(dir, ps, st)
        @test typeof(ps2) == typeof(ps)
        for a in m["arguments"]
            a["role"] == "parameter" && @test at_path(ps2, a["path"]) == at_path(ps, a["path"])
            a["role"] == "state" && a["dtype"] != "ui64" && @test at_path(st2, a["path"]) == at_path(st, a["path"])
        end
        ps3, _ = load_params(dir)
        for a in m["arguments"]
            a["role"] == "parameter" && @test at_path(ps3, a["path"]) == at_path(ps, a["path"])
        end
    end
    return dir
end

@testset "JuliaBridge" begin
    rng = Random.Xoshiro(0)

    @testset "MLIR text helpers" begin
        text = """
        module @m {
          func.func @main(%arg0: tensor<4x1x28x28xf32> {enzymexla.memory_effects = [], tf.aliasing_output = 0 : i32}, %arg1: tensor<f64>, %arg2: tensor<3xcomplex<f32>>) -> (tensor<4x10xf32>, tensor<i1> {jax.result_info = "x(y)"}) {
            %0 = stablehlo.add %arg1, %arg1 : tensor<f64>
            %1 = "enzymexla.lapack.getrf"(%arg0) : (tensor<4x1x28x28xf32>) -> tensor<4x10xf32>
            %2 = stablehlo.custom_call @lapack_sgetrf(%arg0) : (tensor<4x1x28x28xf32>) -> tensor<i1>
            return %1, %2 : tensor<4x10xf32>, tensor<i1>
          }
        }
        """
        sig = main_signature(text)
        @test [t.shape for t in sig.args] == [[4, 1, 28, 28], Int[], [3]]
        @test [t.dtype for t in sig.args] == ["f32", "f64", "complex<f32>"]
        @test [t.dtype for t in sig.results] == ["f32", "i1"]
        bad = unsupported_ops(text)
        @test any(startswith("enzymexla.lapack.getrf"), bad)
        @test any(startswith("stablehlo.custom_call @lapack_sgetrf"), bad)
        @test length(unsupported_ops(text; allow_custom_calls=true)) == 1
        @test isempty(main_signature("func.func @main(%arg0: tensor<2xf32>) {\n}").results)
        @test main_signature("func.func public @main() -> tensor<2xbf16> {").results[1].dtype == "bf16"
    end

    @testset "HDF5 encodings" begin
        @test decode_from_hdf5(reinterpret(UInt16, Float16[1, 2]) |> collect, "f16") == Float16[1, 2]
        @test decode_from_hdf5(UInt8[0, 1, 2], "i1") == [false, true, true]
        @test julia_eltype("ui64") === UInt64
        @test_throws JuliaBridge.BundleReadError decode_from_hdf5(Float32[1], "f64")
    end

    @testset "Dense chain" begin
        model = Chain(Dense(4 => 8, tanh), Dense(8 => 3))
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 4, 5)
        dir = export_and_check("dense", model, ps, st, x)
        m = read_manifest(dir)
        @test [a["path"] for a in m["arguments"]] ==
              [[], ["layer_1", "weight"], ["layer_1", "bias"], ["layer_2", "weight"], ["layer_2", "bias"]]
        @test [a["shape"] for a in m["arguments"]] == [[5, 4], [4, 8], [8], [8, 3], [3]]
        @test m["results"][1]["paths"] == [["output"]]
        @test m["batch"]["size"] == 5
        @test m["batch"]["samples_independent"] == true
        @test_throws JuliaBridge.BundleExistsError export_lux(dir, model, ps, st, x)
    end

    @testset "LeNet" begin
        model = Chain(
            Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)),
            FlattenLayer(3), Dense(256 => 128, relu), Dense(128 => 10),
        )
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 28, 28, 1, 4)
        dir = export_and_check("lenet", model, ps, st, x)
        m = read_manifest(dir)
        @test m["arguments"][1]["shape"] == [4, 1, 28, 28]
        @test m["arguments"][2]["path"] == ["layer_1", "weight"]
        @test m["arguments"][2]["shape"] == [6, 1, 5, 5]
        @test m["results"][1]["shape"] == [4, 10]
    end

    @testset "BatchNorm ($mode mode)" for mode in (:test, :train)
        model = Chain(Dense(3 => 4), BatchNorm(4, relu))
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 3, 6)
        dir = export_and_check("batchnorm_$mode", model, ps, st, x; mode)
        m = read_manifest(dir)
        state_paths = [a["path"] for a in m["arguments"] if a["role"] == "state"]
        @test state_paths == [["layer_2", "running_mean"], ["layer_2", "running_var"]]
        outs = vcat([r["paths"] for r in m["results"]]..., [al["path"] for al in m["aliases"]])
        @test ["state", "layer_2", "running_mean"] in outs
        @test ["state", "layer_2", "running_var"] in outs
        mode === :train && @test m["batch"]["samples_independent"] == false
        if mode === :train
            # new running statistics are computed, so they are results, not aliases
            @test all(al -> first(al["path"]) != "state", m["aliases"])
        end
    end

    @testset "unchanged input in the output (test-mode Dropout)" begin
        model = Parallel(nothing, Dense(2 => 3), Dropout(0.5))
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 2, 4)
        dir = export_and_check("dropout", model, ps, st, x)
        m = read_manifest(dir)
        @test any(al -> al["path"] == ["output", 2] && al["argument"] == 0, m["aliases"])
        seed = findfirst(a -> a["path"] == ["layer_2", "rng", "seed"], m["arguments"])
        @test seed !== nothing
        @test m["arguments"][seed]["dtype"] == "ui64"
        @test any(al -> al["path"] == ["state", "layer_2", "rng", "seed"], m["aliases"])
    end

    @testset "Float64 model with its pullback" begin
        model = Chain(Dense(3 => 4, tanh), Dense(4 => 2))
        ps, st = Lux.setup(rng, model)
        ps = f64(ps)
        x = randn(rng, Float64, 3, 5)
        dir = export_and_check("float64", model, ps, st, x; vjp=true)
        m = read_manifest(dir)
        @test all(a -> a["dtype"] == "f64", m["arguments"])
        @test m["examples"]["rtol"] <= 1e-8
        vjp_text = read(joinpath(dir, m["vjp"]["file"]), String)
        @test JuliaBridge.file_sha256(joinpath(dir, "vjp.mlir")) == m["vjp"]["sha256"]
        vsig = main_signature(vjp_text)
        fsig = main_signature(read(joinpath(dir, "model.mlir"), String))
        @test vsig.args == vcat(fsig.args, fsig.results)
        @test vsig.results == fsig.args
        @test isempty(unsupported_ops(vjp_text))

        # Run the pullback module through Reactant and compare dx with central differences of
        # <model(x), ȳ> on the CPU. hlo_call takes MLIR-layout arrays (R src/Ops.jl:2024-2140).
        ybar = randn(rng, Float64, 2, 5)
        rowmajor(a) = ndims(a) <= 1 ? a : permutedims(a, ndims(a):-1:1)
        args = Any[x, ps.layer_1.weight, ps.layer_1.bias, ps.layer_2.weight, ps.layer_2.bias, ybar]
        rargs = Tuple(Reactant.to_rarray(rowmajor(a)) for a in args)
        run_vjp = Reactant.compile(call_module, (vjp_text, rargs...))   # R src/compiler/Compiler.jl:1372
        outs = run_vjp(vjp_text, rargs...)
        dx = rowmajor(Array(outs[1]))
        f(xx) = sum(first(model(xx, ps, Lux.testmode(st))) .* ybar)
        h = 1e-6
        for i in (1, 4, 7, 15)
            e = zeros(size(x)); e[i] = h
            @test isapprox(dx[i], (f(x .+ e) - f(x .- e)) / 2h; rtol=1e-5, atol=1e-8)
        end
    end

    @testset "clear errors" begin
        model = Chain(Dense(2 => 2))
        ps, st = Lux.setup(rng, model)
        x = randn(rng, Float32, 2, 3)
        bad_ps = (; layer_1=(; weight=ps.layer_1.weight, bias=ps.layer_1.bias, scale=0.5f0))
        @test_throws JuliaBridge.NonReactantLeafError export_lux(joinpath(TMP, "bad.bundle"), model, bad_ps, st, x)
        @test !ispath(joinpath(TMP, "bad.bundle"))
        file = joinpath(TMP, "not_a_bundle")
        write(file, "hello")
        @test_throws JuliaBridge.BundleExistsError export_lux(file, model, ps, st, x; overwrite=true)
        @test read(file, String) == "hello"
    end

    @testset "load_params reads a weights file saved from Python" begin
        file = joinpath(TMP, "python_weights.h5")
        w = randn(rng, Float32, 3, 2)
        HDF5.h5open(file, "w") do f
            HDF5.attrs(f)["format"] = "juliabridge.weights"
            HDF5.attrs(f)["format_version"] = 1
            f["params/layer_1/weight"] = w                       # h5py shape (2, 3) = MLIR shape
            HDF5.attrs(f["params/layer_1/weight"])["dtype"] = "f32"
            f["params/layer_10/scale"] = collect(reinterpret(UInt16, Float16[1, 2]))
            HDF5.attrs(f["params/layer_10/scale"])["dtype"] = "f16"
            f["params/layer_2/mask"] = UInt8[0, 1, 1]
            HDF5.attrs(f["params/layer_2/mask"])["dtype"] = "i1"
        end
        ps, st = load_params(file)
        @test collect(keys(ps)) == [:layer_1, :layer_2, :layer_10]
        @test ps.layer_1.weight == w
        @test ps.layer_10.scale == Float16[1, 2]
        @test ps.layer_2.mask == [false, true, true]
        @test st == NamedTuple()
    end
end
