"""The API table: each public op declared once, with its faces (issue 26 point 2).

An op is written once, in its family module (``engine/ops/<family>.py``: the function, with
PyTorch's parameter names, next to its forward and backward).  This table says which names each
family exports and how users reach them; ``tools/gen_ops.py`` writes from it what would otherwise
be listed by hand in several places, and ``tests/test_ops_api_table.py`` checks that what it
wrote is current (run ``python tools/gen_ops.py`` after editing this table or a listed
function's signature):

- ``engine/ops/__init__.py``: the lazy loader's table (a name is imported from its family on
  first use), the ``TYPE_CHECKING`` imports type checkers read, and ``__all__``;
- ``engine/op_methods.py``: the ``Tensor`` methods that are these functions (``x.exp()`` is
  ``ops.exp(x)``), with the function's signature (``self`` for its first parameter) written
  out, so that type checkers see each method as users call it.

A family's string has one line per name::

    name [= target] [function] [method] [method_]

``= target``: the same function as the family's ``target`` under another name (a PyTorch alias
the family does not define itself); ``function``: a public function, ``tinyopt.<name>`` (else
the engine's own, ``ops.<name>``, as ``nn.functional`` uses ``ops.conv2d``); ``method``:
``Tensor.<name>(...)``, the function with ``self`` for its first argument; ``method_``:
``Tensor.<name>_(...)``, the same written into ``self`` in place (PyTorch's in-place rules,
``engine/inplace.py``).  Methods whose signature or behaviour is not the function's (``add``'s
deprecated overload, ``reshape(2, 3)``, ``where``...) are written by hand in
``engine/tensor_api.py``; the generator refuses a name declared in both places.

A new op touches three files: its family module (the function, its forward and backward), a
line here, and its test (``tests/test_ops_<family>.py``: values against a reference, gradients
against finite differences); ``python tools/gen_ops.py`` then rewrites the lists and methods
(and ``python docs/gen_api.py`` the API reference).

The module is data: nothing imports it when ``tinyopt`` is imported.
"""

from __future__ import annotations

FAMILIES: dict[str, str] = {  # module (under tinyopt.engine): its names
    "ops.conv": """
        avg_pool2d
        conv2d
        max_pool2d
    """,
    "ops.creation": """
        arange                  function
        bernoulli               function
        empty                   function
        empty_like              function
        eye                     function
        fill_random
        full                    function
        full_like               function
        linspace                function
        logspace                function
        multinomial             function
        normal                  function
        ones                    function
        ones_like               function
        rand                    function
        rand_like               function
        randint                 function
        randint_like            function
        randn                   function
        randn_like              function
        randperm                function
        scalar_tensor           function
        zeros                   function
        zeros_like              function
    """,
    "ops.combine": """
        block_diag              function
        cartesian_prod          function
        combinations            function
    """,
    "ops.differences": """
        diff                    function method
    """,
    "ops.distance": """
        vector_norm
    """,
    "ops.histograms": """
        histc                   function method
        histogram               function method
    """,
    "ops.elementwise": """
        abs                     function method method_
        absolute = abs          function method method_
        acos                    function method method_
        add                     function
        addcdiv                 function method method_
        addcmul                 function method method_
        allclose                function method
        arccos                  function method method_
        arcsin                  function method method_
        arctan                  function method method_
        arctan2                 function method method_
        asin                    function method method_
        atan                    function method method_
        atan2                   function method method_
        bitwise_and             function method
        bitwise_not             function method
        bitwise_or              function method
        bitwise_xor             function method
        ceil                    function method method_
        clamp                   function method method_
        clamp_max               function method method_
        clamp_min               function method method_
        clip                    function method method_
        clone                   function
        cos                     function method method_
        cosh                    function method method_
        div                     function method method_
        divide                  function method method_
        eq                      function method
        equal                   function method
        erf                     function method method_
        exp                     function method method_
        expm1                   function method method_
        fix                     function method method_
        floor                   function method method_
        floor_divide            function method method_
        fmod                    function method method_
        frac                    function method method_
        ge                      function method
        gelu
        greater                 function method
        greater_equal           function method
        gt                      function method
        hypot                   function
        isclose                 function method
        isfinite                function method
        isinf                   function method
        isnan                   function method
        isneginf                function method
        isposinf                function method
        le                      function method
        leaky_relu
        lerp                    function method method_
        less                    function method
        less_equal              function method
        log                     function method method_
        log1p                   function method method_
        log2                    function method method_
        log10                   function method method_
        logaddexp               function method
        logaddexp2              function method
        logical_and             function method
        logical_not             function method method_
        logical_or              function method
        logical_xor             function method
        lt                      function method
        maximum                 function method method_
        minimum                 function method method_
        mul                     function method method_
        multiply                function method method_
        nan_to_num              function method method_
        ne                      function method
        neg                     function method method_
        negative                function method method_
        not_equal               function method
        positive                function
        pow                     function method method_
        reciprocal              function method method_
        relu                    function method method_
        remainder               function method method_
        round                   function method method_
        rsqrt                   function method method_
        sigmoid                 function method method_
        sign                    function method method_
        sgn = sign              function method
        silu
        sin                     function method method_
        sinh                    function method method_
        softplus
        sqrt                    function method method_
        square                  function method method_
        sub                     function
        subtract                function
        tan                     function method method_
        tanh                    function method method_
        to
        true_divide             function method method_
        trunc                   function method method_
        where                   function
        xlogy                   function method
    """,
    "ops.indexing": """
        getitem
        masked_fill             function method method_
        setitem
    """,
    "ops.linalg": """
        addbmm                  function method
        addmm                   function method
        addmv                   function method
        addr                    function method
        baddbmm                 function method
        bmm                     function method
        dot                     function method
        einsum                  function
        ger                     function method
        linear
        matmul                  function method
        mm                      function method
        mv                      function method
        outer                   function method
    """,
    "ops.loss": """
        binary_cross_entropy_with_logits
        cross_entropy
        l1_loss
        mse_loss
        nll_loss
        one_hot
    """,
    "ops.matrix_inverse": """
        inverse                 function method
    """,
    "ops.movement": """
        as_strided              function method
        atleast_1d              function
        atleast_2d              function
        broadcast_shapes        function
        broadcast_tensors       function
        broadcast_to            function method
        cat                     function
        chunk                   function method
        column_stack            function
        contiguous
        diag                    function method
        diagonal                function method
        expand
        flatten                 function method
        flip                    function
        fliplr                  function method
        flipud                  function method
        hstack                  function
        meshgrid                function
        moveaxis                function method
        movedim                 function method
        narrow                  function method
        permute                 function
        repeat
        repeat_interleave       function method
        reshape                 function
        roll                    function method
        select                  function method
        split                   function
        squeeze                 function method
        stack                   function
        swapaxes                function method
        swapdims                function method
        t                       function method
        tensor_split            function method
        tile                    function
        trace                   function method
        transpose               function method
        tril                    function method method_
        triu                    function method method_
        unbind                  function method
        unflatten               function method
        unfold                  method
        unsqueeze               function method
        view
        vstack                  function
        concat = cat            function
        concatenate = cat       function
    """,
    "ops.nn": """
        batch_norm
        dropout
        embedding
        layer_norm
    """,
    "ops.quantiles": """
        quantile                function method
    """,
    "ops.reduce": """
        all                     function method
        amax                    function method
        amin                    function method
        any                     function method
        argmax                  function method
        argmin                  function method
        count_nonzero           function method
        cumprod                 function method method_
        cumsum                  function method method_
        log_softmax             function method
        logcumsumexp            function method
        logsumexp               function method
        max                     function method
        mean                    function method
        min                     function method
        norm                    function
        prod                    function method
        softmax                 function method
        std                     function method
        sum                     function method
        var                     function method
    """,
    "ops.selection": """
        argsort                 function method
        argwhere                function method
        bincount                function method
        bucketize               function
        gather                  function method
        index_add               function method method_
        index_copy              function method method_
        index_fill              function method method_
        index_select            function method
        kthvalue                function method
        masked_select           function method
        median                  function method
        msort                   function method
        nanmedian               function method
        nonzero                 function method
        scatter                 function method method_
        scatter_add             function method method_
        searchsorted            function
        sort                    function method
        take                    function method
        take_along_dim          function method
        topk                    function method
        unique                  function method
        unique_consecutive      function method
    """,
    "ops.statistics": """
        corrcoef                function method
        cov                     function method
        cumulative_trapezoid    function
        nanmean                 function method
        nansum                  function method
        trapezoid               function
    """,
    "ops.vector_products": """
        cdist                   function
        cross                   function method
        inner                   function method
        isin                    function
        std_mean                function
        var_mean                function
    """,
    "ops.windows": """
        bartlett_window         function
        blackman_window         function
        hamming_window          function
        hann_window             function
        kaiser_window           function
    """,
    "tensor": """
        as_tensor               function
        from_dlpack             function
        from_numpy              function
        tensor                  function
    """,
}


def entries() -> list[tuple[str, str, str, frozenset[str]]]:
    """``(module, name, attr, faces)`` per line of :data:`FAMILIES`: ``module`` a full module
    name, ``attr`` the family's name for it (``name`` unless aliased), ``faces`` a subset of
    ``{"function", "method", "method_"}``."""
    out = []
    for family, lines in FAMILIES.items():
        for line in lines.splitlines():
            words = line.split()
            if not words:
                continue
            name, attr = words[0], words[0]
            if len(words) > 2 and words[1] == "=":
                attr, words = words[2], words[2:]
            faces = frozenset(words[1:])
            unknown = faces - {"function", "method", "method_"}
            if unknown:
                raise ValueError(f"API table, {family}: {name}: unknown faces {sorted(unknown)}")
            out.append((f"tinyopt.engine.{family}", name, attr, faces))
    return out
