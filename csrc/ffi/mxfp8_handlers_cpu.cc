// placeholder: filled by the block-format work
