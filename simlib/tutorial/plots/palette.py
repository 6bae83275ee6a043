"""The pictures' colours.

Colours follow the Okabe-Ito palette, which stays distinguishable with the
common colour-vision deficiencies; vermillion is kept for danger (a frozen
null, empty or freed pointer, a host ``set_``, a fault). Kernels are coloured
by role, the same in every picture.
"""

from __future__ import annotations

from matplotlib.colors import to_rgb

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}
DANGER = OKABE_ITO["vermillion"]
GREY = "#999999"
ROLE_COLOURS = {
    "norm": OKABE_ITO["sky_blue"], "gate": OKABE_ITO["yellow"], "topk": OKABE_ITO["orange"],
    "copy": OKABE_ITO["purple"], "routed": OKABE_ITO["blue"], "shared": OKABE_ITO["green"],
    "merge": OKABE_ITO["black"], "fill": GREY, "other": "#BBBBBB",
}
ROLE_NAMES = {"copy": "copy / permute", "merge": "merge (residual add)"}


def role_colour(role: str) -> str:
    return ROLE_COLOURS.get(role, ROLE_COLOURS["other"])


def tint(colour: str, amount: float = 0.78) -> tuple[float, float, float]:
    """``colour`` mixed with white: an opaque pastel that black text reads on."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def ink(colour: str) -> str:
    """Black or white, whichever contrasts more with ``colour`` (WCAG relative luminance)."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"
