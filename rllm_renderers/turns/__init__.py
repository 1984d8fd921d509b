"""The syntax of an assistant turn, and parsing a sampled one back into a message.

``formats`` holds the facts the compiler learned (turn close, stops, reasoning markers, tool-call
syntax); ``parsing`` reads a completion with them; ``boundaries`` finds where turns start and end.
"""
