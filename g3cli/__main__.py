"""``python -m g3cli`` (what ``torchrun -m g3cli`` runs): the same as the ``g3`` command."""

from g3cli.main import main

if __name__ == "__main__":
    main()
