"""The MuLo-SD Explorer front end (Gradio).

ui builds the Blocks and wires each event to the module that owns its concern:
- generation: Generate and the ar baseline button (the Run tab's model runs);
- comparison: the Compare and Sweep tabs, and a precomputed sweep opened;
- replays: an uploaded trace read as data and replayed;
- panels: every view of a stored run, the scrubber and the cell card; level_rows: a cascade's levels;
- inputs: knob values typed and checked, the model pair, the prompt builder; links: presets and links;
- control: Stop, running marks and what a session leaves behind; messages: errors and escaping.
Only generation and comparison run the engine. render turns a Trace into images and plots turns it
into Plotly figures, both pure; quality says a run's quality against ar's; files and uploads keep the
disk bounded; theme holds the one palette every view shares; bench times a click and a re-render
(`python -m app.bench`). Nothing here changes what the core computes: every view is derived from a
Trace.
"""
