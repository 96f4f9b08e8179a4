"""g3's GNN models (:mod:`.gnn`): one operator per module, each with its formula and shapes in its docstring
(:mod:`.sage`, :mod:`.gcn`, :mod:`.gat`, :mod:`.decoupled`)."""

from stages.common.model_spec import MODEL_KINDS
from stages.kits.runtime.models.decoupled import DecoupledMLP, Propagate
from stages.kits.runtime.models.gat import GATConv
from stages.kits.runtime.models.gcn import GCNConv
from stages.kits.runtime.models.gnn import GNNModel, build_model, model_from_spec
from stages.kits.runtime.models.sage import SAGEConv
