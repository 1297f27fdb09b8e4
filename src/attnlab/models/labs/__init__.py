"""The labs' models, kept apart from the generic Transformers: their names, signatures and parameter order.

* :mod:`.gru_seq2seq`: the attention lab's GRU encoder-decoder, with and without attention;
* :mod:`.selfattn_seq2seq`: the positional-encoding lab's self-attention encoder-decoder;
* :mod:`.squares_transformer`: a Transformer with the squares models' interface;
* :mod:`.source_padding`: the padded sources every squares model takes.

Their classes are importable from :mod:`attnlab.models`, as the labs import them.
"""
