# JuliaBridge.load_params of a file Python's juliabridge.save_params wrote, back in Julia:
#   julia --project=ENV load_params_back.jl MODEL.jl WEIGHTS.h5 OUT.json
# Loads the file without templates and with the model's own (ps, st) as templates, runs the
# model with each on the CPU (Lux) and writes both outputs to OUT.json.
using JSON: JSON
using JuliaBridge: JuliaBridge
using Lux: Lux

const MODEL_SCRIPT, WEIGHTS, OUT = abspath(ARGS[1]), abspath(ARGS[2]), abspath(ARGS[3])
const M = Module(:E2EModel)
Core.eval(M, :(include(path::AbstractString) = Base.include($M, path)))
Base.include(M, MODEL_SCRIPT)
m = Base.invokelatest(() -> (; model=M.model, ps=M.ps, st=M.st, x=M.x, mode=M.export_mode))
run_with(ps, st) = first(m.model(m.x, ps, m.mode === :test ? Lux.testmode(st) : Lux.trainmode(st)))
ps_free, st_free = JuliaBridge.load_params(WEIGHTS)
ps_tmpl, st_tmpl = JuliaBridge.load_params(WEIGHTS, m.ps, m.st)
outputs = Dict(name => Base.invokelatest(M.lux_array, run_with(ps_, st_))
               for (name, ps_, st_) in (("no_templates", ps_free, st_free), ("templates", ps_tmpl, st_tmpl)))
write(OUT, JSON.json(outputs))
println("wrote ", OUT)
