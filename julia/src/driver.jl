# Entry points for Python (juliabridge/driver/). The `julia` subprocess route runs
#   julia --project=ENV --startup-file=no -e 'using JuliaBridge; exit(JuliaBridge.run_request(ARGS[1]))' REQUEST.json
# where the JSON request names either a `script` (a .jl file defining model, ps, st and x) or a
# `serialized` file (what a juliacall session wrote with the Serialization stdlib: the tuple
# (model, ps, st, inputs), with `packages` to load first). The answer is written to
# request["result_file"] as JSON; progress goes to stdout as `[juliabridge:progress] STEP/NSTEPS MESSAGE`.
# The in-process route (opt-in) calls `export_from_python` in the juliacall session itself.

const SCRIPT_NAMES = (:model, :ps, :st, :x)

"""
A fresh module for a user's script. `Module(name)` gives neither `include` nor `eval` (only
the `module` keyword defines them), so both are defined the way `module` does: a script can
`include("layers.jl")` next to itself and `eval` into its own namespace.
"""
function script_module()::Module
    mod = Module(:JuliaBridgeScript)
    Core.eval(mod, :(eval(x) = Core.eval($mod, x)))
    Core.eval(mod, :(include(path::AbstractString) = Base.include($mod, path)))
    Core.eval(mod, :(include(mapexpr::Function, path::AbstractString) = Base.include(mapexpr, $mod, path)))
    return mod
end

"""
Include the user's script in a fresh module and return (model, ps, st, x, metadata, name).
The script must define `model`, `ps`, `st` and `x` (the example input: one array, or a tuple
for several inputs); it may define `metadata` (an AbstractDict) and `name` (a String).
"""
function load_script(script::AbstractString)
    isfile(script) || throw(ArgumentError("no such script: $script"))
    mod = script_module()
    Base.include(mod, abspath(script))
    missing_ = [n for n in SCRIPT_NAMES if !isdefined(mod, n)]
    isempty(missing_) || throw(
        ArgumentError("$script must define $(join(SCRIPT_NAMES, ", ")); it does not define $(join(missing_, ", "))"),
    )
    get_(n, default) = isdefined(mod, n) ? getfield(mod, n) : default
    metadata = get_(:metadata, Dict{String,Any}())
    metadata isa AbstractDict || throw(ArgumentError("metadata in $script must be an AbstractDict"))
    name = get_(:name, nothing)
    return (; model=getfield(mod, :model), ps=getfield(mod, :ps), st=getfield(mod, :st), x=getfield(mod, :x), metadata, name)
end

function print_progress(step, nsteps, msg)
    println(stdout, "[juliabridge:progress] $step/$nsteps $msg")
    flush(stdout)
    return nothing
end

"""The keywords of `export_model` from a request object (absent or null keys: the defaults)."""
function export_options(req::AbstractDict, metadata::AbstractDict=Dict{String,Any}(); name=nothing)
    meta = Dict{String,Any}(string(k) => v for (k, v) in pairs(metadata))
    extra = get(req, "metadata", nothing)
    extra === nothing || merge!(meta, Dict{String,Any}(string(k) => v for (k, v) in pairs(extra)))
    flag(k, default) = (v = get(req, k, nothing); v === nothing ? default : Bool(v))
    si = get(req, "samples_independent", nothing)
    return (; name=something(get(req, "name", nothing), name, Some(nothing)), mode=Symbol(something(get(req, "mode", nothing), "test")),
            overwrite=flag("overwrite", false), reference=flag("reference", true), metadata=meta,
            samples_independent=si === nothing ? nothing : Bool(si))
end

"""
Run `f()` (an export returning the bundle path) and describe the outcome as the answer object
Python reads: `{"ok": true, "path": ...}` or `{"ok": false, "error_type", "message", "backtrace"}`.
"""
function answer(f)
    try
        return Dict{String,Any}("ok" => true, "path" => f())
    catch err
        err isa InterruptException && rethrow()
        return Dict{String,Any}(
            "ok" => false,
            "error_type" => string(nameof(typeof(err))),
            "message" => sprint(showerror, err),
            "backtrace" => sprint(Base.show_backtrace, catch_backtrace()),
        )
    end
end

"""
The objects a juliacall session serialized: the packages it named are loaded first, so that
their types resolve (types defined in the session's `Main` do not exist here).
"""
function load_serialized(req::AbstractDict)
    for (name, uuid) in get(req, "packages", [])
        Base.require(Base.PkgId(Base.UUID(uuid), name))   # Julia base/loading.jl: require(::PkgId)
    end
    model, ps, st, inputs = open(io -> Base.invokelatest(Serialization.deserialize, io), req["serialized"])
    return (; model, ps, st, x=length(inputs) == 1 ? only(inputs) : Tuple(inputs))
end

"""Run the export described by the JSON file `request_path`; return the process exit code."""
function run_request(request_path::AbstractString)::Int
    req = JSON.parsefile(request_path)
    result = answer() do
        from = haskey(req, "serialized") ? "the objects of your juliacall session" : req["script"]
        print_progress(0, 0, "loading $from")
        s = haskey(req, "serialized") ? load_serialized(req) : load_script(String(req["script"]))
        opts = haskey(s, :metadata) ? export_options(req, s.metadata; name=s.name) : export_options(req)
        # The script may define types and methods: call into them in the latest world.
        Base.invokelatest(export_model, String(req["out"]), s.model, s.ps, s.st, s.x; opts..., progress=print_progress)
    end
    write(String(req["result_file"]), JSON.json(result))
    return result["ok"] ? 0 : 1
end

"""
    export_from_python(out, model, ps, st, options_json, inputs...; progress=nothing) -> String

The in-process juliacall route (opt-in): export `model(x, ps, st)` (objects of the calling
session) to `out` with the options of JSON object `options_json` (the keys of
`export_options`), and return the answer object as JSON text, as `run_request` writes it.
NumPy inputs arrive as juliacall `PyArray`s (Julia's dimension order); the flatten copies them.
"""
function export_from_python(out::AbstractString, model, ps, st, options_json::AbstractString, inputs...; progress=nothing)::String
    result = answer() do
        isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
        opts = export_options(JSON.parse(options_json))
        Base.invokelatest(export_model, String(out), model, ps, st, length(inputs) == 1 ? only(inputs) : inputs; opts..., progress)
    end
    return JSON.json(result)
end
