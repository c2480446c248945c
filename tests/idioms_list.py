"""The snippets of tests/test_idioms.py: everyday PyTorch training code, grouped by topic.

``register(idiom, TENSOR)`` adds them; ``idiom(name, code, xfail=None, compare=True)``.  Each
leaves its answer in ``result``.
"""

from __future__ import annotations


def register(idiom, TENSOR):  # noqa: C901 - a list, not logic
    T = TENSOR  # reason prefix for an idiom that only the Tensor half can make pass (none left)
    # ---- devices, namespaces, the paths scripts import ----------------------------------------
    idiom("device_cpu", """
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        result = str(device)""")
    idiom("accelerator", """
        result = torch.accelerator.is_available()""")
    idiom("backends_mps", """
        result = torch.backends.mps.is_available()""")
    idiom("utils_data_path", """
        ds = torch.utils.data.TensorDataset(torch.tensor(X), torch.tensor(Y))
        loader = torch.utils.data.DataLoader(ds, batch_size=5)
        result = [len(ds), len(loader)]""")
    idiom("import_nn_parallel", """
        import importlib
        importlib.import_module(torch.__name__ + ".nn.parallel")
        result = True""")
    idiom("inference_mode", """
        m = nn.Linear(4, 2)
        with torch.inference_mode():
            y = m(torch.tensor(X))
        result = y.requires_grad""")
    idiom("no_grad_requires_grad", """
        m = nn.Linear(4, 2)
        with torch.no_grad():
            y = m(torch.tensor(X))
        result = y.requires_grad""")
    idiom("manual_seed_repro", """
        torch.manual_seed(3); a = torch.rand(5)
        torch.manual_seed(3); b = torch.rand(5)
        result = bool((a == b).all())""", compare=False)
    idiom("is_cuda", """
        result = torch.zeros(2).is_cuda""")
    idiom("tensor_device", """
        result = str(torch.zeros(2).device)""")
    idiom("x_to_device", """
        device = torch.device("cpu")
        result = torch.tensor(X).to(device).shape""")
    idiom("model_to_device", """
        m = nn.Linear(4, 2).to("cpu")
        result = sum(p.numel() for p in m.parameters())""")
    # ---- creation --------------------------------------------------------------------------------
    idiom("tensor_float", """
        result = torch.tensor([1.0, 2.5]).dtype""")
    idiom("tensor_int", """
        result = torch.tensor([1, 2]).dtype""")
    idiom("from_numpy", """
        a = np.arange(6.0).reshape(2, 3)
        result = torch.from_numpy(a).sum()""")
    idiom("as_tensor", """
        result = torch.as_tensor([[1, 2], [3, 4]]).shape""")
    idiom("zeros_ones", """
        result = [torch.zeros(2, 3), torch.ones((3,)), torch.full((2,), 1.5)]""")
    idiom("full_int", """
        result = torch.full((2,), 7).dtype""")
    idiom("zeros_like", """
        x = torch.tensor(X)
        result = [torch.zeros_like(x).shape, torch.ones_like(x).sum()]""")
    idiom("full_like", """
        result = torch.full_like(torch.tensor(X), 2.0).sum()""")
    idiom("rand_like", """
        result = torch.randn_like(torch.tensor(X)).shape""")
    idiom("randint", """
        result = torch.randint(0, 10, (3, 4)).shape""")
    idiom("randperm", """
        p = torch.randperm(10)
        result = sorted(p.tolist())""")
    idiom("arange_int", """
        result = torch.arange(5)""")
    idiom("arange_float", """
        result = torch.arange(0, 1, 0.25)""")
    idiom("linspace", """
        result = torch.linspace(0, 1, 5)""")
    idiom("eye", """
        result = torch.eye(3)""")
    idiom("empty", """
        result = torch.empty(2, 3).shape""")
    idiom("tril_mask", """
        result = torch.tril(torch.ones(3, 3))""")
    idiom("triu", """
        result = torch.triu(torch.ones(3, 3), diagonal=1)""")
    idiom("legacy_long_tensor", """
        result = torch.LongTensor([1, 2, 3]).dtype""")
    idiom("legacy_float_tensor", """
        result = torch.FloatTensor([[1, 2]]).dtype""")
    idiom("tensor_ctor_shape", """
        result = torch.Tensor(2, 3).shape""")
    idiom("requires_grad_kw", """
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()
        result = x.grad""")
    idiom("new_zeros", """
        result = torch.tensor(X).new_zeros((2, 2)).dtype""")
    # ---- shape -----------------------------------------------------------------------------------
    idiom("view", """
        result = torch.tensor(X).view(8, 8).shape""")
    idiom("view_minus_one", """
        result = torch.tensor(X).view(-1).shape""")
    idiom("view_as", """
        x = torch.tensor(X)
        result = torch.zeros(64).view_as(x).shape""")
    idiom("reshape_as", """
        result = torch.zeros(64).reshape_as(torch.tensor(X)).shape""")
    idiom("flatten_start", """
        result = torch.zeros(2, 3, 4).flatten(1).shape""")
    idiom("permute", """
        result = torch.zeros(2, 3, 4).permute(2, 0, 1).shape""")
    idiom("transpose", """
        result = torch.tensor(X).transpose(0, 1).shape""")
    idiom("t_method", """
        result = torch.tensor(X).t().shape""")
    idiom("T_property", """
        result = torch.tensor(X).T.shape""")
    idiom("unsqueeze_squeeze", """
        x = torch.tensor(X)
        result = [x.unsqueeze(0).shape, x.unsqueeze(-1).squeeze(-1).shape]""")
    idiom("squeeze_tuple", """
        result = torch.zeros(1, 3, 1).squeeze((0, 2)).shape""")
    idiom("expand", """
        result = torch.tensor([[1.0], [2.0]]).expand(2, 3)""")
    idiom("expand_as", """
        result = torch.tensor([[1.0], [2.0]]).expand_as(torch.zeros(2, 4)).sum()""")
    idiom("repeat", """
        result = torch.tensor([1, 2]).repeat(2, 2)""")
    idiom("repeat_interleave", """
        result = torch.tensor([1, 2]).repeat_interleave(2)""")
    idiom("flip", """
        result = torch.arange(4).flip(0)""")
    idiom("roll", """
        result = torch.arange(4).roll(1)""")
    idiom("split", """
        parts = torch.arange(10).split(4)
        result = [p.tolist() for p in parts]""")
    idiom("chunk", """
        result = [c.shape for c in torch.tensor(X).chunk(4, dim=0)]""")
    idiom("unbind", """
        result = len(torch.tensor(X).unbind(1))""")
    idiom("narrow", """
        result = torch.arange(10).narrow(0, 2, 3)""")
    idiom("movedim", """
        result = torch.zeros(2, 3, 4).movedim(0, -1).shape""")
    idiom("cat_stack", """
        a, b = torch.ones(2, 3), torch.zeros(2, 3)
        result = [torch.cat([a, b], dim=1).shape, torch.stack([a, b]).shape]""")
    idiom("size_dim_numel", """
        x = torch.zeros(2, 3, 4)
        result = [x.size(), x.size(1), x.dim(), x.numel(), x.ndim, len(x)]""")
    idiom("contiguous", """
        result = torch.tensor(X).t().contiguous().shape""")
    idiom("mT", """
        result = torch.zeros(2, 3, 4).mT.shape""")
    idiom("swapaxes", """
        result = torch.zeros(2, 3).swapaxes(0, 1).shape""")
    # ---- indexing --------------------------------------------------------------------------------
    idiom("slice_columns", """
        result = torch.tensor(X)[:, 1:3]""")
    idiom("index_row", """
        result = torch.tensor(X)[3]""")
    idiom("ellipsis_none", """
        result = torch.tensor(X)[..., None].shape""")
    idiom("index_array", """
        idx = torch.tensor([0, 5, 2])
        result = torch.tensor(X)[idx]""")
    idiom("bool_mask_index", """
        x = torch.tensor(X)
        result = x[x > 0].shape""")
    idiom("setitem_slice", """
        x = torch.zeros(3, 4)
        x[1, :] = 5.0
        result = x""")
    idiom("setitem_mask", """
        x = torch.tensor(X)
        x[x < 0] = 0
        result = x""")
    idiom("masked_fill", """
        x = torch.tensor(X)
        result = x.masked_fill(x < 0, -1.0)""")
    idiom("causal_mask", """
        att = torch.zeros(4, 4)
        mask = torch.tril(torch.ones(4, 4))
        result = att.masked_fill(mask == 0, float("-inf")).softmax(-1)""")
    idiom("gather", """
        x = torch.tensor(X)
        result = x.gather(1, torch.tensor(Y % 4).unsqueeze(1))""")
    idiom("index_select", """
        result = torch.tensor(X).index_select(0, torch.tensor([1, 0]))""")
    idiom("scatter_add", """
        out = torch.zeros(3).scatter_add(0, torch.tensor([0, 1, 0]), torch.tensor([1.0, 2.0, 3.0]))
        result = out""")
    idiom("nonzero", """
        result = torch.tensor([0, 1, 0, 2]).nonzero()""")
    idiom("where_scalars", """
        x = torch.tensor(X)
        result = torch.where(x > 0, x, 0.0)""")
    idiom("where_tensors", """
        x = torch.tensor(X)
        result = torch.where(x > 0, x, torch.zeros_like(x))""")
    # ---- math ------------------------------------------------------------------------------------
    idiom("arith_broadcast", """
        x = torch.tensor(X)
        result = (x * 2 + 1) / 3 - x ** 2""")
    idiom("scalar_left", """
        x = torch.tensor(X)
        result = 2.0 - x + 1 / (x.abs() + 1)""")
    idiom("matmul_op", """
        x = torch.tensor(X)
        result = x @ x.T""")
    idiom("mm", """
        x = torch.tensor(X)
        result = torch.mm(x, x.t())""")
    idiom("bmm", """
        a = torch.tensor(X).view(2, 8, 4)
        result = torch.bmm(a, a.transpose(1, 2)).shape""")
    idiom("einsum", """
        x = torch.tensor(X)
        result = torch.einsum("ij,kj->ik", x, x)""")
    idiom("outer", """
        result = torch.outer(torch.arange(3.0), torch.arange(2.0))""")
    idiom("addmm", """
        x = torch.tensor(X)
        result = torch.addmm(torch.ones(16), x, torch.ones(4, 16))""")
    idiom("reductions", """
        x = torch.tensor(X)
        result = [x.sum(), x.mean(0), x.max(), x.min(1)[0] if isinstance(x.min(1), tuple) else None]""",
          compare=False)
    idiom("max_dim_values_indices", """
        values, indices = torch.tensor(X).max(dim=1)
        result = [values, indices]""")
    idiom("argmax_accuracy", """
        logits = torch.tensor(X[:, :3])
        y = torch.tensor(Y)
        result = (logits.argmax(dim=1) == y).float().mean().item()""")
    idiom("correct_sum_item", """
        pred = torch.tensor(X[:, :3]).argmax(1)
        result = pred.eq(torch.tensor(Y)).sum().item()""")
    idiom("std_var", """
        x = torch.tensor(X)
        result = [x.std(), x.var(dim=0, unbiased=False)]""")
    idiom("norm", """
        result = torch.tensor(X).norm()""")
    idiom("vector_norm", """
        result = torch.linalg.vector_norm(torch.tensor(X), dim=1)""")
    idiom("cumsum", """
        result = torch.arange(5.0).cumsum(0)""")
    idiom("prod", """
        result = torch.tensor([1.0, 2.0, 3.0]).prod()""")
    idiom("amax", """
        result = torch.tensor(X).amax(dim=0)""")
    idiom("logsumexp", """
        result = torch.tensor(X).logsumexp(dim=1)""")
    idiom("elementwise_fns", """
        x = torch.tensor(X)
        result = [x.exp(), x.abs().log(), x.abs().sqrt(), x.tanh(), x.sigmoid(), x.relu()]""")
    idiom("clamp_clip", """
        x = torch.tensor(X)
        result = [x.clamp(-0.5, 0.5), x.clamp(min=0), torch.clamp(x, max=0.1)]""")
    idiom("more_unary", """
        x = torch.tensor(X)
        result = [x.sign(), x.floor(), x.round(), x.rsqrt().isnan().sum()]""")
    idiom("log1p_expm1", """
        x = torch.tensor(X).abs()
        result = [torch.log1p(x), torch.expm1(x), torch.sin(x), torch.erf(x)]""")
    idiom("remainder", """
        result = torch.arange(6) % 4""")
    idiom("pow_tensor", """
        x = torch.tensor([1.0, 2.0, 3.0])
        result = x.pow(2) + torch.pow(x, x)""")
    idiom("lerp", """
        result = torch.lerp(torch.zeros(3), torch.ones(3), 0.25)""")
    idiom("nan_to_num", """
        result = torch.tensor([float("nan"), 1.0]).nan_to_num(0.0)""")
    idiom("isfinite", """
        result = torch.isfinite(torch.tensor([1.0, float("inf")]))""")
    idiom("logical_ops", """
        a = torch.tensor(X) > 0
        result = (a & (torch.tensor(X) < 1)).sum()""")
    idiom("any_all", """
        x = torch.tensor(X)
        result = [bool((x > 10).any()), bool((x > -10).all())]""")
    idiom("topk", """
        result = torch.tensor(X[0]).topk(2).values""")
    idiom("sort", """
        result = torch.tensor(X[0]).sort().values""")
    idiom("argsort", """
        result = torch.tensor(X[0]).argsort()""")
    idiom("unique", """
        result = torch.tensor(Y).unique()""")
    idiom("multinomial", """
        torch.manual_seed(0)
        result = torch.multinomial(torch.tensor([0.0, 1.0]), 3, replacement=True)""")
    idiom("softmax_dim", """
        result = torch.tensor(X).softmax(dim=-1)""")
    idiom("log_softmax_fn", """
        result = F.log_softmax(torch.tensor(X), dim=1)""")
    # ---- dtypes and conversion -------------------------------------------------------------------
    idiom("float_long", """
        x = torch.tensor(X)
        result = [x.long().dtype, x.long().float().dtype, x.double().dtype]""")
    idiom("int_bool", """
        x = torch.tensor(X)
        result = [x.int().dtype, x.bool().dtype]""")
    idiom("type_method", """
        result = torch.tensor(X).type(torch.float64).dtype""")
    idiom("to_dtype", """
        result = torch.tensor(X).to(torch.float64).dtype""")
    idiom("dtype_names", """
        result = [torch.float32, torch.float, torch.float64, torch.double, torch.long, torch.int64]""")
    idiom("mixed_int_float", """
        result = (torch.arange(3) * 0.5).dtype""")
    idiom("int_div", """
        result = torch.arange(4) / 2""")
    idiom("item_numpy_tolist", """
        x = torch.tensor([[1.5, 2.0]])
        result = [x.sum().item(), x.numpy(), x.tolist()]""")
    idiom("np_asarray", """
        result = np.asarray(torch.tensor(X)).shape""")
    idiom("format_scalar", """
        result = "{:+.2f}".format(torch.tensor(1.2345))""")
    idiom("fstring_item", """
        result = f"{torch.tensor(0.5).item():.3f}" """)
    idiom("print_tensor", """
        result = str(torch.tensor([1.0, 2.0]))""")
    idiom("float_of_tensor", """
        result = float(torch.tensor(X).sum())""")
    # ---- autograd --------------------------------------------------------------------------------
    idiom("backward_grad", """
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * w).sum().backward()
        result = w.grad""")
    idiom("grad_accumulates", """
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        for _ in range(3):
            (w * 3).sum().backward()
        result = w.grad""")
    idiom("retain_graph", """
        w = torch.tensor([1.0], requires_grad=True)
        y = (w * w).sum()
        y.backward(retain_graph=True)
        y.backward()
        result = w.grad""")
    idiom("backward_gradient", """
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * 3).backward(torch.tensor([1.0, 0.5]))
        result = w.grad""")
    idiom("autograd_grad", """
        x = torch.tensor([2.0], requires_grad=True)
        (g,) = torch.autograd.grad((x ** 3).sum(), x)
        result = g""")
    idiom("detach", """
        x = torch.tensor([2.0], requires_grad=True)
        result = (x * 2).detach().requires_grad""")
    idiom("requires_grad_", """
        x = torch.ones(2).requires_grad_()
        (x * 5).sum().backward()
        result = x.grad""")
    idiom("retain_grad", """
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        h = x * 2
        h.retain_grad()
        (h * h).sum().backward()
        result = h.grad""")
    idiom("register_hook", """
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        x.register_hook(lambda g: g * 10)
        (x * 1).sum().backward()
        result = x.grad""")
    idiom("is_leaf", """
        x = torch.tensor([1.0], requires_grad=True)
        result = [x.is_leaf, (x * 2).is_leaf]""")
    idiom("grad_norm", """
        m = seed_weights(nn.Linear(4, 2))
        F.mse_loss(m(torch.tensor(X)), torch.zeros(16, 2)).backward()
        result = m.weight.grad.norm().item()""")
    idiom("set_grad_enabled", """
        with torch.set_grad_enabled(False):
            y = nn.Linear(4, 1)(torch.tensor(X))
        result = y.requires_grad""")
    # ---- in-place updates ------------------------------------------------------------------------
    idiom("manual_sgd", """
        m = seed_weights(nn.Linear(4, 3))
        loss = F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y))
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
        result = F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).item()""")
    idiom("data_sub_", """
        m = seed_weights(nn.Linear(4, 3))
        F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).backward()
        for p in m.parameters():
            p.data.sub_(0.1 * p.grad.data)
        result = m.weight""")
    idiom("data_fill_", """
        m = nn.Linear(4, 3)
        m.bias.data.fill_(0.5)
        result = m.bias""")
    idiom("param_add_alpha", """
        m = seed_weights(nn.Linear(4, 1))
        with torch.no_grad():
            m.weight.add_(torch.ones(1, 4), alpha=0.5)
        result = m.weight""")
    idiom("copy_", """
        a = seed_weights(nn.Linear(4, 2)); b = nn.Linear(4, 2)
        with torch.no_grad():
            for p, q in zip(b.parameters(), a.parameters()):
                p.copy_(q)
        result = b.weight""")
    idiom("ema_update", """
        a = seed_weights(nn.Linear(4, 2)); b = seed_weights(nn.Linear(4, 2), 1)
        with torch.no_grad():
            for pe, p in zip(b.parameters(), a.parameters()):
                pe.mul_(0.9).add_(p, alpha=0.1)
        result = b.weight""")
    idiom("zero_fill_clamp_", """
        x = torch.tensor(X)
        x.clamp_(-0.1, 0.1)
        y = torch.ones(3); y.zero_()
        result = [x, y]""")
    idiom("iadd_tensor", """
        x = torch.zeros(3)
        x += 1
        result = x""")
    idiom("inplace_leaf_error", """
        x = torch.ones(2, requires_grad=True)
        try:
            x.add_(1)
            result = "no error"
        except RuntimeError as e:
            result = "a leaf Variable that requires grad" in str(e)""")
    idiom("init_normal_", """
        m = nn.Linear(100, 100)
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
        result = round(float(m.weight.std()), 1)""", compare=True, rtol=0.2)
    idiom("init_zeros_", """
        m = nn.Linear(4, 4)
        nn.init.zeros_(m.bias); nn.init.ones_(m.weight)
        result = m(torch.ones(1, 4))""")
    idiom("init_xavier_kaiming", """
        m = nn.Conv2d(3, 8, 3)
        nn.init.xavier_uniform_(m.weight); nn.init.kaiming_normal_(m.weight, mode="fan_out")
        nn.init.constant_(m.bias, 0.1)
        result = m.bias""")
    idiom("apply_init", """
        def init(mod):
            if isinstance(mod, nn.Linear):
                nn.init.constant_(mod.weight, 0.5)
                nn.init.zeros_(mod.bias)
        m = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)).apply(init)
        result = m(torch.ones(1, 2))""")
    # ---- modules ---------------------------------------------------------------------------------
    idiom("custom_module", """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(4, 8)
                self.fc2 = nn.Linear(8, 3)
            def forward(self, x):
                return self.fc2(F.relu(self.fc1(x)))
        net = seed_weights(Net())
        result = net(torch.tensor(X))""")
    idiom("sequential_ordered", """
        from collections import OrderedDict
        m = nn.Sequential(OrderedDict([("fc", nn.Linear(4, 2)), ("act", nn.Tanh())]))
        result = [name for name, _ in m.named_parameters()]""")
    idiom("modulelist", """
        m = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        result = [len(m), sum(p.numel() for p in m.parameters())]""")
    idiom("moduledict", """
        m = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
        result = sorted(m.keys())""")
    idiom("count_params", """
        m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 26 * 26, 10))
        result = sum(p.numel() for p in m.parameters() if p.requires_grad)""")
    idiom("freeze", """
        m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        for p in m[0].parameters():
            p.requires_grad = False
        result = [p.requires_grad for p in m.parameters()]""")
    idiom("train_eval_flags", """
        m = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(4))
        m.eval()
        a = m.training
        m.train()
        result = [a, m.training, m[1].training]""")
    idiom("state_dict_keys", """
        m = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4))
        result = list(m.state_dict().keys())""")
    idiom("state_dict_clone", """
        m = seed_weights(nn.Linear(4, 2))
        best = {k: v.clone() for k, v in m.state_dict().items()}
        result = best["weight"]""")
    idiom("load_state_dict_strict_false", """
        m = nn.Linear(4, 2)
        r = m.load_state_dict({"weight": torch.zeros(2, 4)}, strict=False)
        result = [list(r.missing_keys), list(r.unexpected_keys)]""")
    idiom("parameters_to_vector", """
        m = seed_weights(nn.Linear(3, 2))
        v = nn.utils.parameters_to_vector(m.parameters())
        nn.utils.vector_to_parameters(v * 2, m.parameters())
        result = m.bias""")
    idiom("parameterlist", """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.ws = nn.ParameterList([nn.Parameter(torch.ones(2, 2)) for _ in range(2)])
            def forward(self, x):
                for w in self.ws:
                    x = x @ w
                return x
        result = M()(torch.ones(1, 2))""")
    idiom("parameterdict", """
        d = nn.ParameterDict({"scale": nn.Parameter(torch.ones(3))})
        result = [list(d.keys()), list(d.state_dict().keys())]""")
    idiom("register_buffer", """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mask", torch.ones(3))
        result = list(M().state_dict().keys())""")
    idiom("forward_hook", """
        m = seed_weights(nn.Linear(4, 2))
        seen = []
        h = m.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
        m(torch.tensor(X)); h.remove(); m(torch.tensor(X))
        result = seen""")
    idiom("weight_tying", """
        emb = nn.Embedding(10, 4); head = nn.Linear(4, 10, bias=False)
        head.weight = emb.weight
        m = nn.ModuleList([emb, head])
        result = len(list(m.parameters()))""")
    # ---- layers (the functional and module additions of this issue) ------------------------------
    idiom("conv_pool_stack", """
        m = seed_weights(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                       nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)))
        result = m(torch.tensor(X.reshape(1, 1, 4, 16)))""")
    idiom("conv_transpose", """
        m = seed_weights(nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1))
        result = m(torch.tensor(X.reshape(1, 4, 4, 4)))""")
    idiom("dcgan_block", """
        g = seed_weights(nn.Sequential(nn.ConvTranspose2d(4, 8, 4, 1, 0, bias=False),
                                       nn.BatchNorm2d(8), nn.ReLU(True),
                                       nn.ConvTranspose2d(8, 1, 4, 2, 1, bias=False), nn.Tanh()))
        result = g(torch.tensor(X.reshape(16, 4, 1, 1)))""")
    idiom("group_instance_norm", """
        x = torch.tensor(X.reshape(2, 4, 2, 4))
        result = [nn.GroupNorm(2, 4)(x), nn.InstanceNorm2d(4)(x), F.group_norm(x, 4)]""")
    idiom("upsample_interpolate", """
        x = torch.tensor(X.reshape(1, 1, 4, 16))
        result = [nn.Upsample(scale_factor=2)(x), F.interpolate(x, size=(5, 7), mode="bilinear",
                  align_corners=False), F.interpolate(x, scale_factor=0.5, mode="area")]""")
    idiom("pixel_shuffle", """
        x = torch.tensor(X.reshape(1, 4, 2, 8))
        result = nn.PixelShuffle(2)(x).shape""")
    idiom("pad_modes", """
        x = torch.tensor(X.reshape(1, 1, 4, 16))
        result = [F.pad(x, (1, 1, 2, 0)), F.pad(x, (2, 2, 2, 2), mode="reflect"),
                  nn.ZeroPad2d(1)(x).shape, nn.ReplicationPad2d((0, 1, 1, 0))(x)]""")
    idiom("activations", """
        x = torch.tensor(X)
        result = [F.elu(x), F.selu(x), F.hardtanh(x), F.mish(x), F.logsigmoid(x), F.gelu(x),
                  F.leaky_relu(x, 0.2), F.softplus(x), nn.PReLU()(x), nn.ReLU6()(x * 4)]""")
    idiom("dropout_fn_training", """
        x = torch.tensor(X)
        result = [F.dropout(x, 0.5, training=False), nn.Dropout2d(0.3).eval()(x.view(2, 8, 2, 2))]""")
    idiom("normalize_cosine", """
        a, b = torch.tensor(X[:8]), torch.tensor(X[8:])
        result = [F.normalize(a, dim=1), F.cosine_similarity(a, b), F.pairwise_distance(a, b),
                  nn.CosineSimilarity(dim=1)(a, b)]""")
    idiom("embedding_one_hot", """
        emb = seed_weights(nn.Embedding(5, 3))
        idx = torch.tensor([[0, 4], [2, 2]])
        result = [emb(idx), F.one_hot(idx, 5), F.embedding(idx, emb.weight)]""")
    idiom("layernorm_batchnorm", """
        x = torch.tensor(X)
        bn = nn.BatchNorm1d(4)
        result = [nn.LayerNorm(4)(x), bn(x), bn.running_mean]""")
    idiom("bce_family", """
        p = torch.sigmoid(torch.tensor(X[:, 0]))
        y = torch.tensor((Y > 0).astype(np.float32))
        result = [F.binary_cross_entropy(p, y), nn.BCELoss()(p, y),
                  F.binary_cross_entropy_with_logits(torch.tensor(X[:, 0]), y)]""")
    idiom("regression_losses", """
        a, b = torch.tensor(X[:, 0]), torch.tensor(X[:, 1])
        result = [F.mse_loss(a, b), F.l1_loss(a, b), F.smooth_l1_loss(a, b), nn.HuberLoss(delta=0.5)(a, b),
                  nn.SmoothL1Loss(beta=0.3)(a, b)]""")
    idiom("kl_vae", """
        mu, logvar = torch.tensor(X[:, :2]), torch.tensor(X[:, 2:])
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        log_p = F.log_softmax(torch.tensor(X), 1)
        q = F.softmax(torch.tensor(X[::-1].copy()), 1)
        result = [kld, F.kl_div(log_p, q, reduction="batchmean"), nn.KLDivLoss(reduction="sum")(log_p, q)]""")
    idiom("metric_losses", """
        a, p, n = torch.tensor(X[:5]), torch.tensor(X[5:10]), torch.tensor(X[10:15])
        y = torch.tensor([1, -1, 1, 1, -1])
        result = [nn.TripletMarginLoss(margin=1.0)(a, p, n), nn.CosineEmbeddingLoss()(a, p, y),
                  F.triplet_margin_loss(a, p, n, swap=True)]""")
    idiom("cross_entropy_options", """
        logits, y = torch.tensor(X[:, :3]), torch.tensor(Y)
        result = [F.cross_entropy(logits, y), F.cross_entropy(logits, y, label_smoothing=0.1),
                  nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5]))(logits, y),
                  F.nll_loss(F.log_softmax(logits, 1), y, reduction="sum")]""")
    idiom("cross_entropy_ignore_index", """
        result = F.cross_entropy(torch.tensor(X[:, :3]), torch.tensor(np.where(Y == 0, -100, Y)))""")
    # ---- optimizers and schedulers ---------------------------------------------------------------
    idiom("train_mlp_sgd", """
        m = seed_weights(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
        opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y))
            loss.backward()
            opt.step()
        result = loss.item()""")
    idiom("train_adam_wd", """
        m = seed_weights(nn.Linear(4, 3))
        opt = optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
        for _ in range(5):
            opt.zero_grad(); F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).backward(); opt.step()
        result = m.weight""")
    idiom("param_groups_lr", """
        m = seed_weights(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3)))
        opt = optim.SGD([{"params": m[0].parameters(), "lr": 0.01}, {"params": m[1].parameters()}],
                        lr=0.1)
        for g in opt.param_groups:
            g["lr"] *= 0.5
        result = [g["lr"] for g in opt.param_groups]""")
    idiom("step_lr", """
        m = nn.Linear(2, 1)
        opt = optim.SGD(m.parameters(), lr=1.0)
        s = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        lrs = []
        for _ in range(5):
            opt.step(); s.step(); lrs.append(s.get_last_lr()[0])
        result = lrs""")
    idiom("cosine_onecycle", """
        m = nn.Linear(2, 1)
        opt = optim.Adam(m.parameters(), lr=1e-3)
        s = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
        for _ in range(4):
            opt.step(); s.step()
        result = opt.param_groups[0]["lr"]""")
    idiom("plateau", """
        m = nn.Linear(2, 1)
        opt = optim.SGD(m.parameters(), lr=1.0)
        s = optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.1)
        for loss in [1.0, 1.0, 1.0, 1.0]:
            s.step(loss)
        result = opt.param_groups[0]["lr"]""")
    idiom("clip_grad_norm_generator", """
        m = seed_weights(nn.Linear(4, 3))
        F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).backward()
        total = nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.1)
        result = float(total)""")
    idiom("optimizer_state_dict", """
        m = seed_weights(nn.Linear(4, 3))
        opt = optim.Adam(m.parameters())
        F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).backward(); opt.step()
        sd = opt.state_dict()
        result = [sorted(sd["state"][0].keys()), sd["param_groups"][0]["lr"]]""")
    idiom("lbfgs_closure_free", """
        m = seed_weights(nn.Linear(4, 1))
        opt = optim.SGD(m.parameters(), lr=0.05)
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(m(torch.tensor(X)), torch.zeros(16, 1))
            loss.backward()
            return loss
        for _ in range(3):
            loss = opt.step(closure)
        result = loss.item()""")
    idiom("zero_grad_set_to_none", """
        m = seed_weights(nn.Linear(4, 3))
        opt = optim.SGD(m.parameters(), lr=0.1)
        F.cross_entropy(m(torch.tensor(X)), torch.tensor(Y)).backward()
        opt.zero_grad()
        result = [p.grad is None for p in m.parameters()]""")
    # ---- data ------------------------------------------------------------------------------------
    idiom("dataloader_loop", """
        loader = DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=5)
        result = [(xb.shape, yb.shape) for xb, yb in loader]""")
    idiom("dataloader_batch_to_device", """
        device = torch.device("cpu")
        loader = DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=8)
        xb, yb = next(iter(loader))
        result = xb.to(device).sum()""")
    idiom("dataloader_view_as", """
        loader = DataLoader(TensorDataset(torch.tensor(X)), batch_size=8)
        (xb,) = next(iter(loader))
        result = xb.view(8, 2, 2).shape""")
    idiom("dataloader_workers", """
        loader = DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=4,
                            num_workers=2, pin_memory=False, persistent_workers=True)
        result = [yb.tolist() for _, yb in loader]""")
    idiom("custom_dataset", """
        class Squares(Dataset):
            def __len__(self):
                return 6
            def __getitem__(self, i):
                return np.float32(i), i * i
        result = [b[1].tolist() for b in DataLoader(Squares(), batch_size=4)]""")
    idiom("random_split_lengths", """
        torch.manual_seed(0)
        a, b = torch.utils.data.random_split(TensorDataset(torch.tensor(X)), [12, 4])
        result = [len(a), len(b)]""")
    idiom("subset_sampler", """
        ds = TensorDataset(torch.tensor(X), torch.tensor(Y))
        sub = torch.utils.data.Subset(ds, [0, 2, 4])
        s = torch.utils.data.SubsetRandomSampler([1, 3])
        result = [len(sub), len(DataLoader(ds, sampler=s, batch_size=1))]""")
    idiom("weighted_sampler", """
        ds = TensorDataset(torch.tensor(X), torch.tensor(Y))
        s = torch.utils.data.WeightedRandomSampler([0.0] * 15 + [1.0], num_samples=8)
        result = [yb.tolist() for _, yb in DataLoader(ds, sampler=s, batch_size=4)]""")
    idiom("batch_sampler", """
        ds = TensorDataset(torch.tensor(X))
        bs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(ds), 5, drop_last=True)
        result = [xb.shape for (xb,) in DataLoader(ds, batch_sampler=bs)]""")
    idiom("iterable_dataset", """
        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(range(7))
        result = [b.tolist() for b in DataLoader(Stream(), batch_size=3)]""")
    idiom("concat_dataset", """
        ds = TensorDataset(torch.tensor(X)) + TensorDataset(torch.tensor(X[:4]))
        result = len(ds)""")
    idiom("collate_dicts", """
        class D(Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return {"x": np.ones(2, np.float32) * i, "y": i}
        b = next(iter(DataLoader(D(), batch_size=4)))
        result = [b["x"].shape, b["y"].tolist()]""")
    # ---- saving ----------------------------------------------------------------------------------
    idiom("save_load_state_dict", """
        m = seed_weights(nn.Linear(4, 2))
        torch.save(m.state_dict(), "model.pt")
        m2 = nn.Linear(4, 2)
        m2.load_state_dict(torch.load("model.pt"))
        result = m2(torch.tensor(X))""")
    idiom("save_checkpoint_dict", """
        m = seed_weights(nn.Linear(4, 2)); opt = optim.Adam(m.parameters())
        torch.save({"epoch": 3, "model_state_dict": m.state_dict(),
                    "optimizer_state_dict": opt.state_dict(), "loss": 0.25}, "ckpt.pth")
        ck = torch.load("ckpt.pth", weights_only=True, map_location="cpu")
        m.load_state_dict(ck["model_state_dict"]); opt.load_state_dict(ck["optimizer_state_dict"])
        result = [ck["epoch"], ck["loss"]]""")
    idiom("save_to_buffer", """
        buf = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buf)
        buf.seek(0)
        result = torch.load(buf)["w"]""")
    idiom("save_list_of_tensors", """
        torch.save([torch.arange(3), torch.zeros(2)], "l.pt")
        result = torch.load("l.pt")""")
    # ---- full small scripts ----------------------------------------------------------------------
    idiom("eval_loop_accuracy", """
        m = seed_weights(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
        m.eval()
        correct = total = 0
        with torch.no_grad():
            for xb, yb in DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=4):
                out = m(xb)
                _, pred = torch.max(out, 1)
                total += yb.size(0)
                correct += (pred == yb).sum().item()
        result = correct / total""")
    idiom("regression_fit", """
        m = seed_weights(nn.Linear(4, 1))
        opt = optim.SGD(m.parameters(), lr=0.05)
        target = torch.tensor(X[:, :1] * 2.0)
        for _ in range(20):
            opt.zero_grad(); loss = nn.MSELoss()(m(torch.tensor(X)), target); loss.backward(); opt.step()
        result = loss.item()""")
    idiom("cnn_step", """
        m = seed_weights(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                       nn.Dropout2d(0.0), nn.Flatten(), nn.Linear(4 * 2 * 14, 3)))
        opt = optim.Adam(m.parameters(), lr=1e-3)
        x = torch.tensor(X.reshape(1, 1, 4, 16).repeat(3, 0))
        for _ in range(3):
            opt.zero_grad(); loss = F.cross_entropy(m(x), torch.tensor(Y[:3])); loss.backward(); opt.step()
        result = loss.item()""", rtol=1e-4)
    idiom("autoencoder_step", """
        enc = nn.Sequential(nn.Linear(4, 2), nn.Tanh()); dec = nn.Sequential(nn.Linear(2, 4))
        model = seed_weights(nn.Sequential(enc, dec))
        opt = optim.RMSprop(model.parameters(), lr=1e-2)
        for _ in range(5):
            opt.zero_grad(); loss = F.mse_loss(model(torch.tensor(X)), torch.tensor(X)); loss.backward(); opt.step()
        result = loss.item()""", rtol=1e-4)
    idiom("gan_two_optimizers", """
        G = seed_weights(nn.Sequential(nn.Linear(2, 4), nn.LeakyReLU(0.2)))
        D = seed_weights(nn.Sequential(nn.Linear(4, 1), nn.Sigmoid()), 1)
        og, od = optim.Adam(G.parameters(), lr=1e-3), optim.Adam(D.parameters(), lr=1e-3)
        z = torch.tensor(X[:, :2]); real = torch.tensor(X)
        ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
        for _ in range(3):
            od.zero_grad()
            d_loss = F.binary_cross_entropy(D(real), ones) + F.binary_cross_entropy(D(G(z).detach()), zeros)
            d_loss.backward(); od.step()
            og.zero_grad(); g_loss = F.binary_cross_entropy(D(G(z)), ones); g_loss.backward(); og.step()
        result = [d_loss.item(), g_loss.item()]""", rtol=1e-4)
    idiom("policy_gradient", """
        policy = seed_weights(nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=1)))
        opt = optim.Adam(policy.parameters(), lr=1e-2)
        probs = policy(torch.tensor(X))
        logp = torch.log(probs[torch.arange(16), torch.tensor(Y)])
        loss = -(logp * torch.tensor(X[:, 0])).sum()
        opt.zero_grad(); loss.backward(); opt.step()
        result = loss.item()""")
    idiom("categorical_distribution", """
        torch.manual_seed(0)
        d = torch.distributions.Categorical(probs=torch.tensor([0.0, 1.0]))
        result = d.sample().item()""")
    idiom("reinforce_episode", """
        from collections import deque
        Categorical = torch.distributions.Categorical  # (from torch.distributions import ...)
        torch.manual_seed(0)
        class Policy(nn.Module):
            def __init__(self):
                super().__init__()
                self.affine1 = nn.Linear(4, 16); self.dropout = nn.Dropout(p=0.6)
                self.affine2 = nn.Linear(16, 2)
                self.saved_log_probs = []; self.rewards = []
            def forward(self, x):
                x = F.relu(self.dropout(self.affine1(x)))
                return F.softmax(self.affine2(x), dim=1)
        policy = seed_weights(Policy())
        optimizer = optim.Adam(policy.parameters(), lr=1e-2)
        eps = np.finfo(np.float32).eps.item()
        def select_action(state):
            state = torch.from_numpy(state).float().unsqueeze(0)
            m = Categorical(policy(state))
            action = m.sample()
            policy.saved_log_probs.append(m.log_prob(action))
            return action.item()
        actions = []
        for episode in range(2):
            state = X[0].astype(np.float64)
            for t in range(8):  # a toy environment: the action moves the state
                action = select_action(state)
                actions.append(action)
                state = np.roll(state, 1) + (0.1 if action else -0.1)
                policy.rewards.append(1.0 if action == (t % 2) else 0.0)
            R, returns = 0, deque()
            for r in policy.rewards[::-1]:
                R = r + 0.99 * R
                returns.appendleft(R)
            returns = torch.tensor(returns)
            returns = (returns - returns.mean()) / (returns.std() + eps)
            policy_loss = [-log_prob * R for log_prob, R in zip(policy.saved_log_probs, returns)]
            optimizer.zero_grad()
            policy_loss = torch.cat(policy_loss).sum()
            policy_loss.backward()
            optimizer.step()
            del policy.rewards[:]
            del policy.saved_log_probs[:]
        # the sampled actions differ between the libraries' generators: compare what does not
        result = [len(actions), set(actions) <= {0, 1}, type(actions[0]).__name__,
                  math.isfinite(policy_loss.item()), policy_loss.shape,
                  all(p.grad is not None for p in policy.parameters())]""")
    idiom("policy_logits_entropy_bonus", """
        Categorical = torch.distributions.Categorical
        net = seed_weights(nn.Linear(4, 3))
        opt = optim.SGD(net.parameters(), lr=0.1)
        dist = Categorical(logits=net(torch.tensor(X)))
        actions = torch.tensor(Y)
        adv = torch.tensor(X[:, 1])
        loss = -(dist.log_prob(actions) * adv).mean() - 0.01 * dist.entropy().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        result = [loss.item(), net.weight.detach().numpy(), dist.probs.shape,
                  dist.batch_shape]""")
    idiom("gaussian_policy_and_vae_kl", """
        Normal, kl_divergence = torch.distributions.Normal, torch.distributions.kl_divergence
        mu_net = seed_weights(nn.Linear(4, 2))
        log_std = nn.Parameter(torch.zeros(2))
        dist = Normal(mu_net(torch.tensor(X)), log_std.exp())
        acts = torch.tensor(X[:, :2] * 0.5)
        kl = kl_divergence(dist, Normal(torch.zeros(2), torch.ones(2))).sum(-1).mean()
        loss = -dist.log_prob(acts).sum(-1).mean() + kl - 0.1 * dist.entropy().sum(-1).mean()
        loss.backward()
        result = [loss.item(), log_std.grad.numpy(), mu_net.bias.grad.numpy()]""")
    idiom("bernoulli_sample_log_prob", """
        torch.manual_seed(0)
        logits = torch.tensor(X[:4, :3], requires_grad=True)
        d = torch.distributions.Bernoulli(logits=logits)
        s = d.sample()
        ones = torch.ones(4, 3)
        lp = d.log_prob(ones).sum()
        lp.backward()
        result = [s.shape, s.dtype, lp.item(), logits.grad.numpy()]""")
    idiom("finfo_eps", """
        result = [torch.finfo(torch.float32).eps, torch.finfo(torch.float64).max,
                  torch.iinfo(torch.int64).max, torch.finfo().tiny]""")
    idiom("lstm_free_lm_step", """
        emb = seed_weights(nn.Embedding(10, 4)); head = seed_weights(nn.Linear(4, 10), 1)
        opt = optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.5)
        seq = torch.tensor(np.arange(12) % 10)
        inp, tgt = seq[:-1], seq[1:]
        for _ in range(3):
            opt.zero_grad(); loss = F.cross_entropy(head(emb(inp)), tgt); loss.backward(); opt.step()
        result = loss.item()""")
    idiom("bptt_slices", """
        data = torch.tensor(np.arange(40) % 7)
        emb = seed_weights(nn.Embedding(7, 3)); head = seed_weights(nn.Linear(3, 7), 1)
        total = 0.0
        for i in range(0, 30, 10):
            x, y = data[i:i + 10], data[i + 1:i + 11]
            total += F.cross_entropy(head(emb(x)), y).item()
        result = total""")
    idiom("siamese_contrastive", """
        net = seed_weights(nn.Sequential(nn.Linear(4, 3)))
        a, b = net(torch.tensor(X[:8])), net(torch.tensor(X[8:]))
        d = F.pairwise_distance(a, b)
        label = torch.tensor((Y[:8] > 0).astype(np.float32))
        loss = torch.mean(label * d.pow(2) + (1 - label) * torch.clamp(1.0 - d, min=0.0).pow(2))
        loss.backward()
        result = loss.item()""")
    idiom("super_resolution", """
        m = seed_weights(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.PixelShuffle(2)))
        y = m(torch.tensor(X.reshape(1, 1, 4, 16)))
        loss = F.mse_loss(y, F.interpolate(torch.tensor(X.reshape(1, 1, 4, 16)), scale_factor=2,
                                           mode="bilinear", align_corners=False).mean(1, keepdim=True))
        loss.backward()
        result = loss.item()""")
    idiom("gcn_layer", """
        A = torch.tensor((np.eye(16) + np.eye(16, k=1) + np.eye(16, k=-1)).astype(np.float32))
        deg = A.sum(1)
        An = A / deg.unsqueeze(1)
        lin = seed_weights(nn.Linear(4, 3))
        out = An @ lin(torch.tensor(X))
        loss = F.cross_entropy(out, torch.tensor(Y)); loss.backward()
        result = loss.item()""")
    idiom("polynomial_regression", """
        x = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32)).unsqueeze(1)
        feats = torch.cat([x ** i for i in range(1, 4)], 1)
        fc = seed_weights(nn.Linear(3, 1))
        opt = optim.SGD(fc.parameters(), lr=0.1)
        for _ in range(10):
            opt.zero_grad(); loss = F.smooth_l1_loss(fc(feats), 2 * x ** 3 - x); loss.backward(); opt.step()
        result = loss.item()""")
    idiom("forward_forward_goodness", """
        layer = seed_weights(nn.Linear(4, 8))
        h = F.relu(layer(F.normalize(torch.tensor(X), dim=1)))
        g = h.pow(2).mean(1)
        loss = torch.log(1 + torch.exp(-(g - 2.0))).mean()
        loss.backward()
        result = loss.item()""")
    idiom("grad_accumulation", """
        m = seed_weights(nn.Linear(4, 3))
        opt = optim.SGD(m.parameters(), lr=0.1)
        opt.zero_grad()
        for i in range(4):
            loss = F.cross_entropy(m(torch.tensor(X[4 * i:4 * i + 4])), torch.tensor(Y[4 * i:4 * i + 4])) / 4
            loss.backward()
        opt.step()
        result = m.bias""")
    idiom("early_stopping_best_state", """
        import copy
        m = seed_weights(nn.Linear(4, 3))
        best = copy.deepcopy(m.state_dict())
        m.load_state_dict(best)
        result = m(torch.tensor(X[:2]))""")
    idiom("deepcopy_model", """
        import copy
        m = seed_weights(nn.Linear(4, 3))
        m2 = copy.deepcopy(m)
        result = m2(torch.tensor(X[:2]))""")
    idiom("loss_item_running_mean", """
        m = seed_weights(nn.Linear(4, 3))
        running = 0.0
        for xb, yb in DataLoader(TensorDataset(torch.tensor(X), torch.tensor(Y)), batch_size=8):
            running += F.cross_entropy(m(xb), yb).item() * xb.size(0)
        result = running / 16""")
    idiom("tqdm_free_progress_string", """
        loss = torch.tensor(0.123456)
        result = f"loss: {loss.item():.4f}" """)
    idiom("numpy_interop_metrics", """
        logits = seed_weights(nn.Linear(4, 3))(torch.tensor(X))
        pred = logits.detach().numpy().argmax(1)
        result = int((pred == Y).sum())""")
    idiom("softmax_temperature_sample", """
        torch.manual_seed(0)
        probs = F.softmax(torch.tensor([[1.0, 2.0, 3.0]]) / 0.7, dim=-1)
        result = probs""")
    # ---- names public scripts meet first (issue 28) ----------------------------------------------
    idiom("cudnn_flags_dcgan", """
        import importlib
        cudnn = importlib.import_module(torch.__name__ + ".backends.cudnn")
        cudnn.benchmark = True
        result = [cudnn.is_available(), torch.backends.cudnn.benchmark]
        cudnn.benchmark = False""")
    idiom("module_cuda_refused_as_on_a_cpu_build", """
        m = nn.Linear(4, 2)
        try:
            m.cuda()
            result = "moved"
        except AssertionError as e:
            result = str(e).split(":")[0]""")
    idiom("accuracy_over_an_empty_split", """
        out = nn.Linear(4, 3)(torch.tensor(X))
        target = torch.tensor(Y)
        mask = torch.arange(16)[16:]
        pred = out[mask].argmax(dim=1)
        result = [tuple(pred.shape), (pred == target[mask]).float().sum().item()]""")
    idiom("shrinkage_activations", """
        x = torch.tensor(X)
        codes = nn.Sequential(nn.Softshrink(0.3), nn.Tanhshrink())(x)
        gate = nn.Threshold(0.1, 0.0)(x) + F.softsign(x) + F.hardshrink(x, 0.5)
        probs = nn.Softmax2d()(x.view(2, 2, 4, 4))
        result = [codes, gate, probs]""")
    idiom("compile_returns_a_callable_model", """
        m = seed_weights(nn.Linear(4, 2))
        cm = torch.compile(m)
        result = cm(torch.tensor(X[:3]))""")
    idiom("compile_decorator", """
        @torch.compile(mode="max-autotune")
        def f(x):
            return x.sin() + 1
        result = f(torch.tensor(X[:2]))""")
    idiom("num_threads", """
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        one = torch.get_num_threads()
        torch.set_num_threads(n)
        result = [one, torch.get_num_threads() == n]""")
    idiom("sum_keepdims_numpy_spelling", """
        x = torch.tensor(X)
        result = [x.sum(1, keepdims=True), torch.mean(x, dim=0, keepdims=True).shape,
                  x.amax(-1, keepdims=True).shape]""")
    idiom("add_deprecated_alpha_first", """
        import warnings
        p = torch.tensor(X[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p.add_(-0.1, torch.ones(4))
        result = p""")
    idiom("range_index_and_assign", """
        logits = torch.tensor(X[:5, :3])
        y = torch.tensor(Y[:5])
        picked = logits[range(5), y]
        d = torch.zeros_like(logits)
        d[range(5), y] = -1.0 / 5
        result = [picked, d]""")
    idiom("random_sampler_replacement_huge", """
        ds = TensorDataset(torch.tensor(X), torch.tensor(Y))
        sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=int(1e10))
        loader = DataLoader(ds, batch_size=4, sampler=sampler)
        xb, yb = next(iter(loader))
        result = [len(sampler), tuple(xb.shape)]""")
    idiom("save_whole_model", """
        m = seed_weights(nn.Sequential(nn.Linear(4, 3), nn.Tanh()))
        torch.save(m, "model.pt")
        back = torch.load("model.pt", weights_only=False)
        result = back(torch.tensor(X[:2]))""")
    idiom("whole_model_refused_by_default", """
        import pickle
        torch.save(nn.Linear(4, 3), "model.pt")
        try:
            torch.load("model.pt")
            result = "loaded"
        except pickle.UnpicklingError as e:
            result = str(e).split(".")[0]""")
    idiom("load_state_dict_file", """
        m = seed_weights(nn.Linear(4, 3))
        torch.save(m.state_dict(), "lenet.pth")
        m2 = nn.Linear(4, 3)
        m2.load_state_dict(torch.load("lenet.pth", map_location="cpu", weights_only=True))
        result = m2(torch.tensor(X[:2]))""")
    idiom("autograd_function_legendre", """
        class LegendrePolynomial3(torch.autograd.Function):
            @staticmethod
            def forward(ctx, input):
                ctx.save_for_backward(input)
                return 0.5 * (5 * input ** 3 - 3 * input)

            @staticmethod
            def backward(ctx, grad_output):
                input, = ctx.saved_tensors
                return grad_output * 1.5 * (5 * input ** 2 - 1)

        x = torch.linspace(-1, 1, 50)
        c = torch.tensor(0.1, requires_grad=True)
        d = torch.tensor(0.3, requires_grad=True)
        loss = (LegendrePolynomial3.apply(c + d * x) - x).pow(2).sum()
        loss.backward()
        result = [loss.item(), c.grad, d.grad]""")
    idiom("autograd_function_straight_through", """
        class RoundSTE(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.round()

            @staticmethod
            def backward(ctx, g):
                return g

        lin = seed_weights(nn.Linear(4, 3))
        out = RoundSTE.apply(lin(torch.tensor(X)) * 4)
        F.cross_entropy(out, torch.tensor(Y)).backward()
        result = lin.weight.grad""")
    idiom("onnx_export_word_language_model_flag", """
        import importlib
        onnx_module = importlib.import_module(torch.__name__ + ".onnx")
        model = seed_weights(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)))
        model.eval()
        onnx_module.export(model, (torch.tensor(X[:2]),), "model.onnx", input_names=["x"],
                           output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                           opset_version=18, dynamo=False)
        result = os.path.getsize("model.onnx") > 0""")
    idiom("spatial_transformer_stn", """
        class STN(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc_loc = nn.Sequential(nn.Linear(16, 8), nn.ReLU(True), nn.Linear(8, 6))
                self.fc_loc[2].weight.data.zero_()
                self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

            def forward(self, x):
                theta = self.fc_loc(x.view(-1, 16)).view(-1, 2, 3)
                grid = F.affine_grid(theta, x.size(), align_corners=False)
                return F.grid_sample(x, grid, align_corners=False)

        net = STN()
        seed_weights(net.fc_loc[0])
        x = torch.tensor(X.reshape(4, 1, 4, 4))
        out = net(x)
        out.pow(2).mean().backward()
        result = [out, net.fc_loc[2].weight.grad]""")
    idiom("gcn_sparse_adjacency", """
        edges = np.array([[i, (i + 1) % 16] for i in range(16)] + [[i, i] for i in range(16)]).T
        adj = torch.sparse_coo_tensor(torch.tensor(edges), torch.ones(edges.shape[1]) / 2, (16, 16))
        lin = seed_weights(nn.Linear(4, 3))
        out = torch.sparse.mm(adj, lin(torch.tensor(X)))
        loss = F.cross_entropy(out, torch.tensor(Y))
        loss.backward()
        result = [loss.item(), lin.weight.grad]""")
    idiom("dense_to_sparse_spmm", """
        A = torch.tensor((np.eye(16) + np.eye(16, k=1)).astype(np.float32)).to_sparse()
        h = torch.spmm(A, torch.tensor(X))
        result = [A._nnz(), A.is_sparse, h, A.to_dense().sum().item()]""")
    idiom("sparse_coalesce_values", """
        s = torch.sparse_coo_tensor([[0, 1, 0], [1, 0, 1]], [1.0, 2.0, 3.0], (2, 2)).coalesce()
        result = [s.indices(), s.values(), s.to_dense()]""")
    idiom("rmsnorm_llama_block", """
        norm = nn.RMSNorm(4, eps=1e-6)
        fc = seed_weights(nn.Linear(4, 4))
        h = torch.tensor(X)
        out = h + fc(norm(h))
        out.sum().backward()
        result = [out, norm.weight.grad, F.rms_norm(h, (4,))]""")
    idiom("activation_checkpoint_block", """
        import importlib
        cp = importlib.import_module(torch.__name__ + ".utils.checkpoint")
        block = seed_weights(nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4)))
        x = torch.tensor(X)
        y = cp.checkpoint(block, x, use_reentrant=False)
        y.pow(2).mean().backward()
        result = [y, block[0].weight.grad]""")
    idiom("unsqueeze_in_place_batch_dim", """
        img = torch.tensor(X[0])
        img.unsqueeze_(0)
        m = seed_weights(nn.Linear(4, 2))
        result = [img.shape, m(img)]""")
    idiom("weight_norm_parametrization", """
        from importlib import import_module
        P = import_module(torch.__name__ + ".nn.utils.parametrizations")
        m = P.weight_norm(seed_weights(nn.Linear(4, 3)))
        out = m(torch.tensor(X)).sum()
        out.backward()
        result = [sorted(m.state_dict()), out.item(), m.parametrizations.weight.original0.grad]""")
    idiom("spectral_norm_discriminator_eval", """
        from importlib import import_module
        P = import_module(torch.__name__ + ".nn.utils.parametrizations")
        m = P.spectral_norm(seed_weights(nn.Linear(4, 3)))
        m.eval()
        u = m.parametrizations.weight[0]._u
        result = [sorted(m.state_dict()), tuple(u.shape), type(m).__name__]""")
    idiom("orthogonal_rnn_weight", """
        from importlib import import_module
        P = import_module(torch.__name__ + ".nn.utils.parametrizations")
        m = P.orthogonal(nn.Linear(4, 4, bias=False))
        w = m.weight
        result = torch.allclose(w @ w.t(), torch.eye(4), atol=1e-5)""")
    idiom("video_conv3d_block", """
        net = seed_weights(nn.Sequential(
            nn.Conv3d(1, 2, 3, padding=1), nn.BatchNorm3d(2), nn.ReLU(), nn.MaxPool3d(2),
            nn.ConvTranspose3d(2, 2, 2, stride=2), nn.AvgPool3d(2), nn.AdaptiveAvgPool3d(1),
            nn.Flatten(), nn.Linear(2, 3)))
        clip = torch.tensor(np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 1, 4, 4, 4))
        loss = F.cross_entropy(net(clip), torch.tensor([0, 2]))
        loss.backward()
        result = [loss.item(), net[0].weight.grad]""", rtol=1e-4)
    idiom("timm_style_jit_guards", """
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.act = nn.Hardswish()

            def forward(self, x):
                if torch.jit.is_scripting() or torch.jit.is_tracing():
                    return self.fc(x)
                return self.act(self.fc(x)) + x

        m = seed_weights(Block())
        result = m(torch.tensor(X))""")
    idiom("testing_assert_close_in_a_check", """
        a = torch.tensor(X)
        torch.testing.assert_close(a * 2, a + a)
        result = [torch.pi, torch.version.cuda, str(a.layout)]""")
    idiom("pretrained_weights_from_url", """
        import pathlib
        m = seed_weights(nn.Linear(4, 3))
        torch.save(m.state_dict(), "lenet.pth")
        url = pathlib.Path("lenet.pth").resolve().as_uri()
        sd = torch.hub.load_state_dict_from_url(url, model_dir="hub", progress=False)
        m2 = nn.Linear(4, 3)
        m2.load_state_dict(sd)
        result = m2(torch.tensor(X))""")
    idiom("data_parallel_wrapper_and_module_path", """
        model = seed_weights(nn.Linear(4, 3))
        if torch.cuda.device_count() > 1 or True:
            model = nn.DataParallel(model)
        torch.use_deterministic_algorithms(True)
        torch.set_float32_matmul_precision("high")
        out = model(torch.tensor(X))
        torch.use_deterministic_algorithms(False)
        torch.set_float32_matmul_precision("highest")
        result = [sorted(model.state_dict()), out, model.module.weight.shape]""")
    idiom("angle_of_2d_points_and_bare_grad_decorators", """
        @torch.no_grad
        def angles(p):
            return torch.atan2(p[:, 1], p[:, 0])

        p = torch.tensor(X[:, :2], requires_grad=True)
        theta = p[:, 1].atan2(p[:, 0])
        theta.sum().backward()
        result = [angles(p), angles(p).requires_grad, p.grad]""")
    idiom("least_squares_by_normal_equations_and_inverse", """
        A = torch.tensor(X, requires_grad=True)
        y = torch.tensor(X[:, :1] * 2 - X[:, 1:2])
        G = A.T @ A + 0.1 * torch.eye(A.shape[1])
        w = torch.linalg.solve(G, A.T @ y)
        w2 = torch.inverse(G) @ (A.T @ y)
        ((A @ w - y) ** 2).mean().backward()
        result = [w, w2, A.grad]""", rtol=1e-4)
    idiom("feature_statistics_and_gated_units", """
        feats = torch.tensor(X)
        feats[0, 1] = float("nan")
        centre = feats.nanmean(0, keepdim=True)
        clean = torch.nan_to_num(feats - centre)
        corr = torch.corrcoef(clean.T)
        gate = nn.GLU(dim=1)(torch.cat([clean, clean], 1))
        window = torch.hann_window(8)
        area = torch.trapezoid(clean, dim=1)
        result = [centre, corr, gate, window, area]""", rtol=1e-5)
