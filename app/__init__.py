"""The MuLo-SD Explorer front end (Gradio).

ui builds the Blocks and wires events; handlers are the functions events call (only `generate`,
`compare` and `sweep` run the engine); render turns a Trace into images and plots turns it into
Plotly figures, both pure; theme holds the one palette every view shares; bench times a click and
a re-render (`python -m app.bench`). Nothing here changes what the core computes: every view is
derived from a Trace.
"""
