#pragma once
// data/: datasets, the DataLoader, image and text readers, transforms, the WordPiece tokenizer,
// MLM masking and dynamic batching. Everything is in namespace precis::data; see docs/data.md.
#include "data/cifar.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/file_bytes.h"
#include "data/idx.h"
#include "data/sample_rng.h"
#include "data/text/corpus.h"
#include "data/text/mlm.h"
#include "data/text/token_batching.h"
#include "data/text/unicode.h"
#include "data/text/wordpiece.h"
#include "data/text/wordpiece_trainer.h"
#include "data/transforms.h"
