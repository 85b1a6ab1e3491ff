# The pullback module (spec §5): @main takes every forward @main argument, then one cotangent
# per forward @main result, and returns one cotangent per forward argument, in order.
#
# It is traced from `lux_vjp`, which calls `Enzyme.autodiff` on the scalar <results, cotangents>.
# Inside a Reactant trace that call emits an `enzyme.autodiff` op (overlay at
# R src/Overlay.jl:44-78, implementation R src/Enzyme.jl:313-600) which the `:all` pipeline
# differentiates into plain StableHLO. The call pattern follows Reactant's own Lux test
# (R test/nn/lux.jl:13-40): `Enzyme.make_zero` shadows, `Duplicated`, `Active` return.

# Which forward arguments are differentiated: real floating-point ones. Integer and Bool
# arguments (e.g. a Dropout RNG seed) get a zero cotangent of their own type (spec §5).
is_differentiable(a::ArgumentInfo) = is_float_dtype(a.dtype)

"""
The trace-time plan, as nested tuples of integers/symbols so it can be a `Val` parameter
(a type parameter must be isbits, a Symbol or a tuple of those):
- `diff`: for each differentiated argument, `(root, steps...)` with root 1/2/3 = x/ps/st;
- `slots`: for each forward argument, `(d, (root, steps...))`, `d` = its index in `diff` or 0;
- `outs`: for each forward result, where its value comes from: `(:y, steps...)` (its first
  path in (y, st_new)), `(:arg, root, steps...)` for an echo without a path (the argument
  itself), or `nothing` if it is not a real float (its cotangent is then unused).
So the module is the pullback of `@main` itself: an echo's cotangent flows to its argument
inside the module, and only aliases (not `@main` results) are left to the reader (spec §5).
"""
function vjp_plan(traced::TracedForward)
    isbits_step(s) = s isa Union{Int,Symbol}
    for a in traced.arguments
        all(isbits_step, a.steps) || throw(
            ExportError("vjp=true: argument $(a.index) ($(path_label(a.path))) sits under a Dict key; use NamedTuples/Tuples"),
        )
        is_complex_dtype(a.dtype) && throw(ExportError("vjp=true supports real arguments only; $(path_label(a.path)) is $(a.dtype)"))
    end
    for r in traced.results
        is_complex_dtype(r.dtype) && throw(ExportError("vjp=true supports real results only; result $(r.index) is $(r.dtype)"))
        isempty(r.steps) || all(isbits_step, first(r.steps)) ||
            throw(ExportError("vjp=true: result $(r.index) sits under a Dict key of the output; return NamedTuples/Tuples"))
    end
    located(a) = (a.source - 1, a.steps...)
    diff_args = [a for a in traced.arguments if is_differentiable(a)]
    isempty(diff_args) && throw(ExportError("vjp=true: no floating-point argument to differentiate"))
    diff = Tuple(located(a) for a in diff_args)
    slots = Tuple(
        (is_differentiable(a) ? findfirst(d -> d === a, diff_args) : 0, located(a)) for a in traced.arguments
    )
    function source(r)
        is_float_dtype(r.dtype) || return nothing
        isempty(r.steps) || return (:y, first(r.steps)...)
        return (:arg, located(traced.arguments[r.echo_of + 1])...)
    end
    outs = Tuple(source(r) for r in traced.results)
    all(o -> o === nothing, outs) && throw(ExportError("vjp=true: the model has no floating-point result"))
    return (diff, slots, outs)
end

"""
Check a differentiated argument can be substituted inside the traced objective: every
container on its path is a Tuple, NamedTuple or Array (see `replace_at`).
"""
function check_substitutable(trees, plan)
    for loc in plan[1]
        v = trees
        for s in Base.front(loc)
            v isa Union{Tuple,NamedTuple,Array} || throw(
                ExportError("vjp=true: a differentiated array sits inside a $(typeof(v)); only Tuples, NamedTuples and Arrays can hold parameters for the pullback"),
            )
            v = v isa NamedTuple && s isa Symbol ? getfield(v, s) : v[s]
        end
        v isa Union{Tuple,NamedTuple,Array} || throw(ExportError("vjp=true: cannot rebuild a $(typeof(v))"))
    end
    return nothing
end

# `t` with the value at `loc` replaced by `v`, rebuilding immutable containers on the way.
# One method with branches: separate methods for `(::Any, ::Tuple{})` and `(::Tuple, ::Tuple)`
# would be ambiguous for a Tuple container and an empty location.
function replace_at(t, loc::Tuple, v)
    isempty(loc) && return v
    i, rest = first(loc), Base.tail(loc)
    if t isa Tuple
        new = replace_at(t[i], rest, v)
        return ntuple(j -> j == i ? new : t[j], length(t))
    elseif t isa NamedTuple
        k = i isa Integer ? keys(t)[i] : i
        return merge(t, NamedTuple{(k,)}((replace_at(getfield(t, k), rest, v),)))
    elseif t isa Array
        c = copy(t)
        c[i] = replace_at(t[i], rest, v)
        return c
    end
    throw(ExportError("vjp=true: cannot rebuild a $(typeof(t))"))
end

# The value at `loc` (root index into trees, then Reactant steps).
value_at(trees, loc::Tuple) = follow(trees, loc)

"""The scalar whose gradient is the VJP: the sum over float results of `sum(result .* ct)`."""
function vjp_objective(model, dleaves, trees, cts, ::Val{plan}) where {plan}
    diff, _, outs = plan
    for (d, loc) in enumerate(diff)
        trees = replace_at(trees, loc, dleaves[d])
    end
    x, ps, st = trees
    out = model(x, ps, st)
    total = nothing
    for (k, o) in enumerate(outs)
        o === nothing && continue
        value = first(o) === :y ? follow(out, Base.tail(o)) : follow(trees, Base.tail(o))
        term = sum(value .* cts[k])
        total = total === nothing ? term : total + term
    end
    return total
end

# A zero cotangent shaped like traced value `v` (an integer argument's cotangent).
zero_cotangent(v::Reactant.TracedRArray{T}) where {T} = Reactant.Ops.fill(zero(T), size(v))   # R src/Ops.jl:291-310
zero_cotangent(v::Reactant.TracedRNumber{T}) where {T} = Reactant.Ops.fill(zero(T), ())

"""
The traced pullback: cotangents of every forward argument for cotangents `cts` of every
forward result. Named and top-level, so arguments are numbered like the forward function
(x, ps, st leaves, then the leaves of `cts`; `model` and the `Val` contribute none).
"""
function lux_vjp(model, x, ps, st, cts, plan::Val{P}) where {P}
    diff, slots, _ = P
    trees = (x, ps, st)
    dleaves = map(loc -> value_at(trees, loc), diff)
    shadows = Enzyme.make_zero(dleaves)
    Enzyme.autodiff(
        Enzyme.set_runtime_activity(Enzyme.ReverseWithPrimal),
        Enzyme.Const(vjp_objective),
        Enzyme.Active,
        Enzyme.Const(model),
        Enzyme.Duplicated(dleaves, shadows),
        Enzyme.Const(trees),
        Enzyme.Const(cts),
        Enzyme.Const(plan),
    )
    return map(slot -> first(slot) == 0 ? zero_cotangent(value_at(trees, last(slot))) : shadows[first(slot)], slots)
end

"""
Trace `lux_vjp` to StableHLO text, then check `@main` is exactly (forward arguments...,
result cotangents...) -> (argument cotangents...), and that Enzyme left no ops behind.
"""
function trace_vjp(model, x, ps, st, traced::TracedForward; client, allow_custom_calls::Bool=false)::String
    plan = vjp_plan(traced)
    check_substitutable((x, ps, st), plan)
    # Example cotangents: zeros of each result's Julia shape and type (values do not matter).
    cts = Tuple(Reactant.to_rarray(zeros(r.eltype, r.julia_shape...); client) for r in traced.results)
    args = (model, x, ps, st, cts, Val(plan))
    text = MLIR.IR.@dispose ctx = Reactant.ReactantContext() begin
        # `args_in_result=:result` (a make_mlir_fn keyword compile_mlir passes through,
        # R src/compiler/Compiler.jl:238-288, R src/TracedUtils.jl:307, 745-753): the pullback's
        # @main returns exactly the cotangent tuple. Arguments that Enzyme or a @trace'd layer
        # rebind stay out of it; mutations of the model's arguments were already refused by the
        # forward export, which traces with the default `:all`.
        mod, res = Reactant.Compiler.compile_mlir(
            ctx,
            lux_vjp,
            args;
            client,
            drop_unsupported_attributes=true,
            compile_options=export_compile_options(),
            args_in_result=:result,
        )
        try
            check_vjp_tables(res, traced, cts)
            string(mod)
        finally
            MLIR.IR.dispose(mod)
        end
    end
    check_ops(text, "vjp"; allow_custom_calls)
    sig = main_signature(text)
    want_args = vcat([TensorSig(reverse(a.julia_shape), a.dtype) for a in traced.arguments],
                     [TensorSig(reverse(r.julia_shape), r.dtype) for r in traced.results])
    want_results = [TensorSig(reverse(a.julia_shape), a.dtype) for a in traced.arguments]
    sig.args == want_args && sig.results == want_results || throw(
        ExportError("the vjp module's @main is $(sig.args) -> $(sig.results), expected $want_args -> $want_results"),
    )
    return text
end

# The vjp @main must take the forward arguments (the very same arrays) then the cotangents,
# and result k must be the k-th element of the returned tuple.
function check_vjp_tables(res, traced::TracedForward, cts)
    n = length(traced.arguments)
    keys_ = [k for (k, _) in res.seen_args]
    expected = vcat(Any[a.value for a in traced.arguments], collect(Any, cts))
    (length(keys_) == length(expected) && all(keys_ .=== expected)) || throw(
        ExportError("the vjp module's arguments are not the forward arguments followed by one cotangent per result"),
    )
    length(res.linear_results) == n || throw(
        ExportError("the vjp module returns $(length(res.linear_results)) values, expected $n (one per forward argument); Enzyme left pass-through results"),
    )
    for (k, r) in enumerate(res.linear_results)
        (k,) in result_steps(r) || throw(ExportError("vjp result $(k - 1) is not the cotangent of argument $(k - 1)"))
    end
    return nothing
end
