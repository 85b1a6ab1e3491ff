# Entry points for Python (juliabridge/driver/). The `julia` subprocess route runs
#   julia --project=ENV --startup-file=no -e 'using JuliaBridge; exit(JuliaBridge.run_request(ARGS[1]))' REQUEST.json
# where the JSON request names either a `script` (a .jl file defining model, ps, st and x; it may
# define metadata and name) or a `serialized` file (what a juliacall session wrote with the
# Serialization stdlib: (model, ps, st, inputs), with the `packages` to load first), the export's
# options and a `result_file` for the answer. Progress goes to stdout as
# `[juliabridge:progress] STEP/NSTEPS MESSAGE`. The in-process route (opt-in) calls
# `export_from_python` in the juliacall session itself.

"""The script's (model, ps, st, x, metadata, name), run in a fresh module that has `include` and
`eval` (`Module` alone gives neither), so it can include files next to it."""
function load_script(script::AbstractString)
    isfile(script) || throw(ArgumentError("no such script: $script"))
    mod = Module(:JuliaBridgeScript)
    Core.eval(mod, :(eval(x) = Core.eval($mod, x)))
    Core.eval(mod, :(include(path::AbstractString) = Base.include($mod, path)))
    Base.include(mod, abspath(script))
    # The script's globals are newer than this call's world: read them in the latest one (Julia
    # 1.12 warns about, and will refuse, reading a binding from an older world).
    defined(n) = Base.invokelatest(isdefined, mod, n)::Bool
    missing_ = [n for n in (:model, :ps, :st, :x) if !defined(n)]
    isempty(missing_) || throw(ArgumentError("$script must define model, ps, st and x; it does not define $(join(missing_, ", "))"))
    get_(n, default=nothing) = defined(n) ? Base.invokelatest(getglobal, mod, n) : default
    get_(:metadata, Dict()) isa AbstractDict || throw(ArgumentError("metadata in $script must be an AbstractDict"))
    return (; model=get_(:model), ps=get_(:ps), st=get_(:st), x=get_(:x), metadata=get_(:metadata, Dict()), name=get_(:name))
end

"""The objects a juliacall session serialized, after loading the packages it named so that their
types resolve (a type defined in the session's `Main` does not exist here)."""
function load_serialized(req::AbstractDict)
    for (name, uuid) in get(req, "packages", [])
        Base.require(Base.PkgId(Base.UUID(uuid), name))   # Julia base/loading.jl: require(::PkgId)
    end
    model, ps, st, inputs = open(io -> Base.invokelatest(Serialization.deserialize, io), req["serialized"])
    return (; model, ps, st, x=length(inputs) == 1 ? only(inputs) : Tuple(inputs), metadata=Dict(), name=nothing)
end

"""The keywords of `export_model` from a request (absent or null keys: the defaults)."""
function export_options(req::AbstractDict, metadata::AbstractDict=Dict(); name=nothing)
    meta = merge(Dict{String,Any}(string(k) => v for (k, v) in metadata), something(get(req, "metadata", nothing), Dict()))
    flag(k, default) = something(get(req, k, nothing), default)
    return (; name=something(get(req, "name", nothing), name, Some(nothing)), mode=Symbol(flag("mode", "test")),
            overwrite=flag("overwrite", false), reference=flag("reference", true), metadata=meta,
            samples_independent=get(req, "samples_independent", nothing))
end

"""`{"ok": true, "path": f()}`, or `{"ok": false, "error_type", "message", "backtrace"}`."""
function answer(f)
    try
        return Dict{String,Any}("ok" => true, "path" => f())
    catch err
        err isa InterruptException && rethrow()
        return Dict{String,Any}("ok" => false, "error_type" => string(nameof(typeof(err))), "message" => sprint(showerror, err),
                                "backtrace" => sprint(Base.show_backtrace, catch_backtrace()))
    end
end

print_progress(step, nsteps, msg) = (println(stdout, "[juliabridge:progress] $step/$nsteps $msg"); flush(stdout); nothing)

"""Run the export described by the JSON file `request_path`; return the process exit code."""
function run_request(request_path::AbstractString)::Int
    req = JSON.parsefile(request_path)
    result = answer() do
        serialized = haskey(req, "serialized")
        print_progress(0, 0, "loading $(serialized ? "the objects of your juliacall session" : req["script"])")
        s = serialized ? load_serialized(req) : load_script(String(req["script"]))
        # The script may define types and methods: call into them in the latest world.
        Base.invokelatest(export_model, String(req["out"]), s.model, s.ps, s.st, s.x;
                          export_options(req, s.metadata; name=s.name)..., progress=print_progress)
    end
    write(String(req["result_file"]), JSON.json(result))
    return result["ok"] ? 0 : 1
end

"""
    export_from_python(out, model, ps, st, options_json, inputs...; progress=nothing) -> String

The in-process juliacall route: export with the options of JSON object `options_json` (the keys
of `export_options`); return the answer object as JSON text, as `run_request` writes it.
"""
function export_from_python(out::AbstractString, model, ps, st, options_json::AbstractString, inputs...; progress=nothing)::String
    result = answer() do
        isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
        opts = export_options(JSON.parse(options_json))
        Base.invokelatest(export_model, String(out), model, ps, st, length(inputs) == 1 ? only(inputs) : inputs; opts..., progress)
    end
    return JSON.json(result)
end
