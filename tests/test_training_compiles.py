"""`fit` compiles once per structure (graph, loss, regularizer, optimizer kind, proximal,
batch size, accuracy, batched or not, dtypes and shapes): another number of epochs,
`log_every`, learning rate, strength, `tol` or `working_tol` compiles nothing (issue 26).
Before, each of them was a constant of the compiled loop, and every variant of a fit paid
its compile again (15-25 s for a 30-40 DAG)."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import invariant_jax as ij
from compile_count import CountCompiles

jax.config.update("jax_enable_x64", True)


def test_numbers_compile_nothing_structure_does():
    g = ij.random_dag(3, 4, 1, 0.6, 1, bias=True)  # hidden-to-hidden edges: the working-set step
    X = jr.normal(jr.key(0), (12, 3))
    Y = (X[:, :1] > 0).astype(X.dtype)
    net = ij.DAGNetwork(g, key=jr.key(1))

    def run(optimizer="sgd", strength=0.05, **opts):
        options = ij.TrainOptions(optimizer=optimizer, proximal=True, batch_size=6, **{"learning_rate": 0.1, **opts})
        obj = ij.Objective("bce", regularizer="nuclear", strength=strength)
        return ij.fit(net, X, Y, loss=obj, options=options)

    counter = CountCompiles()
    with counter:
        first = run(epochs=4, log_every=2)
    assert counter.n > 0  # the counter sees compiles
    variants = [
        dict(epochs=6, log_every=3),
        dict(epochs=4, log_every=1),
        dict(epochs=70, log_every=1),  # more logs than one compiled call holds
        dict(epochs=4, log_every=2, learning_rate=0.03),
        dict(epochs=4, log_every=2, strength=0.2),  # and so the default working_tol
        dict(epochs=4, log_every=2, tol=1e-3),
        dict(epochs=4, log_every=2, working_tol=1e-4),
    ]
    results = []
    for v in variants:
        with counter:
            results.append(run(**v))
        assert counter.n == 0, f"{v} compiled {counter.n} programs"
    long = results[2]
    assert long.log.thetas.shape == (71, len(g.edges)) and int(long.log.epochs[-1]) == 70
    assert not np.allclose(results[3].network.edge_weights(), first.network.edge_weights())  # the rate is used
    # the first run again is the same program run again: bit for bit
    np.testing.assert_array_equal(run(epochs=4, log_every=2).log.thetas, first.log.thetas)
    with counter:
        adam = run(optimizer="adam", epochs=4, log_every=2)
    assert counter.n > 0  # another optimizer is another program
    assert bool(jnp.all(adam.success))
