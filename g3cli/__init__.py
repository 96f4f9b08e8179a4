"""The g3 command-line interface (thin: every command calls one stage entry function)."""
