# Shared by the end-to-end model scripts: Lux's own CPU outputs (plain Julia arrays, no Reactant),
# stored in the export's metadata as the reference independent of the compiled function.
using Lux, Random

"""A Julia array as JSON data: its Julia size and its values in column-major order, as Float64."""
lux_array(a::AbstractArray) = Dict("julia_shape" => collect(size(a)), "values" => Float64.(vec(a)))

"""The float arrays of a state tree by dotted Lux path (RNGs and settings left out)."""
function state_arrays(st, prefix="")
    out = Dict{String,Any}()
    st isa AbstractArray{<:AbstractFloat} && (out[prefix] = lux_array(st); return out)
    st isa NamedTuple || return out
    for (k, v) in pairs(st)
        merge!(out, state_arrays(v, isempty(prefix) ? string(k) : prefix * "." * string(k)))
    end
    return out
end

"""
    lux_reference(model, ps, st, x; mode=:test) -> Dict

`model(x, ps, st)` run by Lux on the CPU in `mode`: the inputs, the output `y` and the state
arrays of the new state, as `metadata["lux"]` of the export.
"""
function lux_reference(model, ps, st, x; mode::Symbol=:test)
    y, st_new = model(x, ps, mode === :test ? Lux.testmode(st) : Lux.trainmode(st))
    inputs = x isa Tuple ? [lux_array(xi) for xi in x] : [lux_array(x)]
    return Dict("lux" => Dict("mode" => string(mode), "inputs" => inputs, "y" => lux_array(y),
                              "state" => state_arrays(st_new)))
end
