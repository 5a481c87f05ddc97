"""Draw the Fashion-MNIST figure of the benchmarks page (``docs/_static/fashion_mnist.png``).

The figure of two result files of ``sk-deq compare``, a page's figure rather
than a figure of the library, so it lives beside the pages.

Accuracy against width, readout-trained networks in the top row and networks
trained end to end by SGD in the bottom row (ReLU left, tanh right)::

    sk-deq compare --data fashion-mnist --widths 256,512,1024,2048,4096 --repeats 3 --threads 2 --out readout
    sk-deq compare --data fashion-mnist --trainable all --widths 256,512,1024 --repeats 3 --threads 2 --out sgd
    python docs/plot_fashion_mnist.py readout/compare_widths.json sgd/compare_widths.json docs/_static/fashion_mnist.png

The two result files are kept as ``benchmarks/results/fashion_mnist_readout.json``
and ``benchmarks/results/fashion_mnist_sgd.json``.
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sk_deq.plotting import plot_compare_widths


def draw(readout: dict, sgd: dict):
    """A 2×2 figure: one column per activation, one row per training."""
    fig, axes = plt.subplots(2, 2, figsize=(9, 7), layout="constrained")
    for row, (result, training) in enumerate([(readout, "readout trained"), (sgd, "all weights, SGD")]):
        plot_compare_widths(result, show_time=False, axes=axes[row : row + 1])
        for ax in axes[row]:
            ax.set_title(f"{ax.get_title()}: {training}", fontsize="medium")
    for top, bottom in zip(axes[0], axes[1]):  # the same width axis in both rows
        bottom.set_xlim(top.get_xlim())
        bottom.set_xticks(top.get_xticks(), [t.get_text() for t in top.get_xticklabels()])
        bottom.minorticks_off()
    return fig


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("readout", help="compare_widths.json of the readout-trained run")
    parser.add_argument("sgd", help="compare_widths.json of the run with --trainable all")
    parser.add_argument("out", help="the figure's file (PNG)")
    args = parser.parse_args(argv)
    with open(args.readout) as f_readout, open(args.sgd) as f_sgd:
        fig = draw(json.load(f_readout), json.load(f_sgd))
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
